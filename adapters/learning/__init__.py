"""Learning-to-rank adapters (``memory_core.ports.learning.RankLearner``)."""
