"""scorecli: offline batch scoring with transformer rerankers, classifiers and reward models."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # keep `import scorecli` light: torch and transformers load only when Scorer is used
    if name == "Scorer":
        from scorecli.scorer import Scorer

        return Scorer
    if name == "ScoreConfig":
        from scorecli.config import ScoreConfig

        return ScoreConfig
    raise AttributeError(name)


__all__ = ["Scorer", "ScoreConfig", "__version__"]
