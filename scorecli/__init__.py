"""scorecli: offline batch scoring with transformer rerankers, classifiers and reward models.

    from scorecli import Scorer
    scorer = Scorer("minilm")  # a path, Hub id or short name; Scorer(): $SCORECLI_MODEL or the default
    print(scorer.score_table(pyarrow.table({"query": ["q"], "items": [["a", "b"]]})).to_pylist())

`Scorer` prints nothing unless asked (`progress=True`); `resolve_model` is the model resolution the
command line uses too.
"""

from scorecli.version import __version__


def __getattr__(name: str):
    # keep `import scorecli` light: torch and transformers load only when Scorer is used
    if name == "Scorer":
        from scorecli.scorer import Scorer

        return Scorer
    if name == "resolve_model":
        from scorecli.model.default_model import resolve_model

        return resolve_model
    if name == "ScoreConfig":
        from scorecli.config import ScoreConfig

        return ScoreConfig
    raise AttributeError(name)


__all__ = ["Scorer", "ScoreConfig", "__version__", "resolve_model"]
