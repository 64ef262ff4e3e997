"""The success policy of a TrainingJob (spec.successPolicy): reaching targetAccuracy ends
the training as Completed, reason TargetAccuracyReached; earlyStoppingPatience epochs without
a lower loss end it as Completed, reason EarlyStopped."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SuccessPolicy:
    target_accuracy: float | None = None
    patience: int | None = None
    best_loss: float | None = None
    stale: int = 0
    history: list = field(default_factory=list)

    def update(self, epoch: int, metrics: dict) -> tuple[str, str] | None:
        """(reason, message) when the training should end now, else None."""
        acc = metrics.get("accuracy")
        if self.target_accuracy is not None and acc is not None and float(acc) >= self.target_accuracy:
            return "TargetAccuracyReached", "epoch %d: accuracy %.4g reached the target %.4g" % (
                epoch, float(acc), self.target_accuracy)
        loss = metrics.get("loss")
        if self.patience is not None and loss is not None:
            if self.best_loss is None or float(loss) < self.best_loss:
                self.best_loss, self.stale = float(loss), 0
            else:
                self.stale += 1
                if self.stale >= self.patience:
                    return "EarlyStopped", "epoch %d: no lower loss than %.4g for %d epochs" % (
                        epoch, self.best_loss, self.stale)
        return None
