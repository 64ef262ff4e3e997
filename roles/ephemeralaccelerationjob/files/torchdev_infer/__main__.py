"""python -m torchdev_infer: see torchdev_infer.runner."""
import sys

from torchdev_infer.runner import main

if __name__ == "__main__":
    sys.exit(main())
