"""Learning curves (PNG): warm-up loss and held-out imitation accuracy; RL training and validation JCT."""

from __future__ import annotations

from pathlib import Path

from dl2.rl.actor_critic import IterationStats
from dl2.rl.supervised import SupervisedHistory


def _figure(columns: int) -> tuple[object, list[object]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, columns, figsize=(6 * columns, 4.2))
    return figure, list(axes) if columns > 1 else [axes]


def _save(figure: object, path: Path) -> None:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp.png")
    figure.tight_layout()  # type: ignore[attr-defined]
    figure.savefig(temporary, dpi=110)  # type: ignore[attr-defined]
    plt.close(figure)  # type: ignore[arg-type]
    temporary.replace(path)


def plot_warm_up(history: SupervisedHistory, path: Path, title: str) -> None:
    figure, (loss_axes, accuracy_axes) = _figure(2)
    epochs = range(1, len(history.train_loss) + 1)
    loss_axes.plot(epochs, history.train_loss, marker="o")  # type: ignore[attr-defined]
    loss_axes.set_xlabel("epoch")  # type: ignore[attr-defined]
    loss_axes.set_ylabel("cross-entropy (training)")  # type: ignore[attr-defined]
    accuracy_axes.plot(epochs, history.held_out_accuracy, marker="o", color="tab:green")  # type: ignore[attr-defined]
    accuracy_axes.set_xlabel("epoch")  # type: ignore[attr-defined]
    accuracy_axes.set_ylabel("accuracy on held-out teacher decisions")  # type: ignore[attr-defined]
    for axes in (loss_axes, accuracy_axes):
        axes.grid(True, alpha=0.3)  # type: ignore[attr-defined]
    figure.suptitle(title)  # type: ignore[attr-defined]
    _save(figure, path)


def plot_rl(history: list[IterationStats], path: Path, title: str, unit_s: float, unit: str) -> None:
    figure, (jct_axes, loss_axes) = _figure(2)
    iterations = [s.iteration for s in history]
    jct_axes.plot(iterations, [s.train_jct_s / unit_s for s in history], label="training episodes", alpha=0.6)  # type: ignore[attr-defined]
    validated = [s for s in history if s.validation_jct_s is not None]
    jct_axes.plot(  # type: ignore[attr-defined]
        [s.iteration for s in validated],
        [(s.validation_jct_s or 0.0) / unit_s for s in validated],
        marker="o",
        label="validation (greedy)",
    )
    jct_axes.set_xlabel("iteration")  # type: ignore[attr-defined]
    jct_axes.set_ylabel(f"average JCT ({unit})")  # type: ignore[attr-defined]
    jct_axes.legend()  # type: ignore[attr-defined]
    loss_axes.plot(iterations, [s.entropy for s in history], label="policy entropy")  # type: ignore[attr-defined]
    loss_axes.plot(iterations, [s.value_loss for s in history], label="value loss")  # type: ignore[attr-defined]
    loss_axes.set_xlabel("iteration")  # type: ignore[attr-defined]
    loss_axes.legend()  # type: ignore[attr-defined]
    for axes in (jct_axes, loss_axes):
        axes.grid(True, alpha=0.3)  # type: ignore[attr-defined]
    figure.suptitle(title)  # type: ignore[attr-defined]
    _save(figure, path)
