"""torchdev_infer: the image inference runner of an EphemeralAccelerationJob.

The ephemeralaccelerationjob role ships this package in the ConfigMap <name>-infer, mounted
on the inference container's PYTHONPATH, and runs ``python -m torchdev_infer`` with the
job's model, input and output (module_utils/ephemeralaccelerationjob.py runner_args).
It needs torch and Pillow (the default image, pytorch/pytorch, has both, and torchvision);
torchvision for the built-in models, safetensors for a .safetensors model file.  It imports
nothing of the torchdev repository (docs/architecture.md).
"""

from torchdev_infer.runner import EXIT_CODES, InferenceError, main, run  # noqa: F401

__all__ = ["EXIT_CODES", "InferenceError", "main", "run"]
