"""Installs t2t_lite; `problems/` and `hparams/` become t2t_lite.problems and t2t_lite.hparams."""

import re
from pathlib import Path

from setuptools import find_packages, setup

_HERE = Path(__file__).parent
_VERSION = re.search(
    r'__version__ = "([^"]+)"', (_HERE / "t2t_lite" / "__init__.py").read_text()
).group(1)


setup(
    name="t2t_lite",
    version=_VERSION,
    description=(
        "The Transformer of 'Attention Is All You Need' on TensorFlow 2 / Keras 3, "
        "used the tensor2tensor way: named problems, hparams sets, one trainer command."
    ),
    long_description=(_HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=["t2t_lite", "t2t_lite.problems", "t2t_lite.hparams"]
    + [f"t2t_lite.{name}" for name in find_packages("t2t_lite")],
    package_dir={
        "t2t_lite": "t2t_lite",
        "t2t_lite.problems": "problems",
        "t2t_lite.hparams": "hparams",
    },
    # The server's web page (t2t_lite/serving/web_page.py): plain files, no build step.
    package_data={"t2t_lite.serving": ["page/*.html", "page/*.css", "page/*.js"]},
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tensorflow-text>=2.21,<2.22",
        "keras>=3.10,<4",
        "tensorflow-datasets>=4.9,<5",
        # TFDS's WMT builders import it on every Python, but TFDS declares it only for
        # Python < 3.9; without it `--source=tfds` fails at its first step.
        "importlib_resources>=6",
        "sentencepiece>=0.2,<0.3",
        "sacrebleu>=2.4,<3",
        "sacremoses>=0.1,<0.3",
        "absl-py>=2.1,<3",
        "tensorboard>=2.21,<2.22",
        "numpy>=1.26",
        "matplotlib>=3.8",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.5",
            "ruff>=0.6",
            "ctranslate2>=4.5,<5",
            # Drives headless Chromium (Debian's chromium and chromium-driver) in the page's tests.
            "selenium>=4.20",
        ],
        "ctranslate2": ["ctranslate2>=4.5,<5"],
    },
    entry_points={
        "console_scripts": [
            "t2t-trainer=t2t_lite.trainer:run",
            "t2t-datagen=t2t_lite.datagen:run",
            "t2t-decoder=t2t_lite.decoder:run",
            "t2t-avg-checkpoints=t2t_lite.avg_checkpoints:run",
            "t2t-exporter=t2t_lite.exporter:run",
            "t2t-serve=t2t_lite.serve:run",
            "t2t-evalb=t2t_lite.evalb:run",
            "t2t-attention=t2t_lite.attention:run",
        ],
    },
)
