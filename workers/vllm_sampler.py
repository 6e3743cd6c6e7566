"""The ``vllm`` sampler: a vLLM engine on the GPU, weights pushed from the trainer each step.

Imported only when ``sampler: vllm`` is chosen (needs a GPU and the ``gpu`` extra, ``pip
install 'gapwatch[gpu]'``). The engine loads the same local HF directory as the trainer
and serves in ``sampler_dtype``. Log-probs: ``SamplingParams(logprobs=0)`` returns the
sampled token's log-prob, and the engine is built with ``logprobs_mode="processed_logprobs"``
so that log-prob is taken AFTER temperature (the actual sampling distribution), like the
torch sampler's; vLLM's default (``raw_logprobs``) would be the pre-temperature one.

Weight sync (``sync``): ``LLM.collective_rpc("gapwatch_load_weights", ...)`` on a worker
extension class (``WeightLoader``) that calls the model's own ``load_weights`` with the
trainer's ``named_parameters`` (vLLM maps HF names onto its fused layers itself). The
tensors travel through the engine's RPC, which is simple and correct for the models this
project trains; a multi-GPU trainer would broadcast over NCCL instead.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gapwatch.workers.sampling import Generation


class WeightLoader:
    """vLLM worker extension (``worker_extension_cls``): load weights sent by the trainer."""

    model_runner: Any

    def gapwatch_load_weights(self, named: list[tuple[str, torch.Tensor]]) -> int:
        """Load ``(hf_name, tensor)`` pairs into the served model; return how many."""
        device = next(self.model_runner.model.parameters()).device
        self.model_runner.model.load_weights(weights=[(n, t.to(device)) for n, t in named])
        return len(named)


class VLLMSampler:
    """Sampling with vLLM's ``LLM`` on the trainer's model directory."""

    def __init__(
        self, model: nn.Module, tokenizer: Any, *, dtype: str, seed: int, stops: tuple[str, ...]
    ) -> None:
        if not torch.cuda.is_available():
            raise ValueError("sampler 'vllm' needs a CUDA GPU; use sampler: torch on this machine")
        try:
            from vllm import LLM
        except ImportError:
            raise ValueError("sampler 'vllm' needs vLLM: pip install 'gapwatch[gpu]'") from None
        path = getattr(model, "name_or_path", None) or getattr(model.config, "_name_or_path", "")
        if not path:
            raise ValueError("sampler 'vllm' needs a model loaded from a local directory")
        self.tokenizer = tokenizer
        self.stops = stops
        self.llm = LLM(
            model=str(path),
            tokenizer=str(path),
            dtype=dtype,
            seed=seed,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
            gpu_memory_utilization=0.4,
            worker_extension_cls=f"{__name__}.WeightLoader",
        )
        self.sync(model)

    def sync(self, model: nn.Module) -> None:
        """Push the trainer's current weights into the engine."""
        named = [(n, p.detach().to("cpu")) for n, p in model.named_parameters()]
        self.llm.collective_rpc("gapwatch_load_weights", args=(named,))
        self.llm.reset_prefix_cache()  # cached KV of the old weights is stale

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        shared: int = 0,
    ) -> list[Generation]:
        """One action per prompt; the sampled tokens' post-temperature log-probs. ``shared``
        is not needed: the engine's prefix caching reads a shared prefix once."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [
            SamplingParams(
                temperature=temperature,
                max_tokens=max_new_tokens,
                stop=list(self.stops),
                include_stop_str_in_output=True,
                logprobs=0,
                seed=seed * 100_003 + i,
            )
            for i in range(len(prompts))
        ]
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
        )
        gens = []
        for out in outs:
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            lps = [float(step[t].logprob) for t, step in zip(ids, comp.logprobs or [], strict=True)]
            gens.append(Generation(ids, lps, truncated=comp.finish_reason == "length"))
        return gens
