"""``ToolEpisodes``, a multi-turn tool task as TRL's ``rollout_func``: see
``gapwatch.orchestrator.integrations.trl_episodes``."""

from gapwatch.orchestrator.integrations.trl_episodes import ToolEpisodes, episode_reward

__all__ = ["ToolEpisodes", "episode_reward"]
