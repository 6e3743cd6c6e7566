"""``ToolEpisodes``, a multi-turn tool task as TRL's ``rollout_func``: see
``orchestrator.integrations.trl_episodes``."""

from orchestrator.integrations.trl_episodes import ToolEpisodes, episode_reward

__all__ = ["ToolEpisodes", "episode_reward"]
