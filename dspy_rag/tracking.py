"""MLflow, when it is installed and a tracking URI is configured: compile and eval log their settings and
scores to a run there, and DSPy's autolog records the optimizer's trials and compiled program.

The ledger stays the record. MLflow missing or failing never stops a compile or an eval: the first failure
is reported once and nothing more is sent. LM call traces are not sent, since a served LM's span attributes
can carry its API key.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dspy_rag.config import Config

Warn = Callable[[str], None]


class MLflowRun:
    """One MLflow run, or nothing when MLflow is not configured or has failed."""

    def __init__(self, warn: Warn) -> None:
        self.warn = warn
        self.mlflow: Any = None  # the mlflow module once a run has started

    def send(self, what: Callable[[Any], Any]) -> None:
        if self.mlflow is None:
            return
        try:
            what(self.mlflow)
        except Exception as exc:  # noqa: BLE001 - whatever MLflow raises, the ledger alone goes on
            self.warn(f"MLflow failed ({type(exc).__name__}: {exc}); the ledger alone records this run")
            self.mlflow = None

    def params(self, values: dict[str, Any]) -> None:
        self.send(lambda mlflow: mlflow.log_params({k: v for k, v in values.items() if v is not None}))

    def metrics(self, values: dict[str, float | None]) -> None:
        self.send(lambda mlflow: mlflow.log_metrics({k: float(v) for k, v in values.items() if v is not None}))


def _start(config: Config, name: str, run: MLflowRun) -> None:
    import mlflow
    import mlflow.dspy

    mlflow.set_tracking_uri(config.mlflow.tracking_uri)
    mlflow.set_experiment(config.mlflow.experiment)
    mlflow.dspy.autolog(log_traces=False, log_compiles=True, log_evals=True, silent=True)
    mlflow.start_run(run_name=name)
    run.mlflow = mlflow


@contextmanager
def mlflow_run(config: Config, name: str, warn: Warn) -> Iterator[MLflowRun]:
    """A run named `name` for the duration of the block, ended as failed if the block raises."""
    run = MLflowRun(warn)
    if not config.mlflow.tracking_uri:
        yield run
        return
    try:
        _start(config, name, run)
    except ImportError:
        warn("MLflow tracking is configured but MLflow is not installed (pip install 'dspy-rag[mlflow]'); "
             "the ledger alone records this run")
    except Exception as exc:  # noqa: BLE001
        warn(f"MLflow at {config.mlflow.tracking_uri} failed ({type(exc).__name__}: {exc}); "
             "the ledger alone records this run")
    try:
        yield run
    except BaseException:
        run.send(lambda mlflow: mlflow.end_run(status="FAILED"))
        raise
    run.send(lambda mlflow: mlflow.end_run())
