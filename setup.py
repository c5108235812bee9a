import os
from glob import glob

from setuptools import find_packages, setup

package_name = "oxygen_ros"


def _tree(folder: str, share: str) -> list[tuple[str, list[str]]]:
    """data_files entries installing every file under `folder` to the same relative place under `share`."""
    entries = []
    for parent, _, files in sorted(os.walk(folder)):
        if files:
            entries.append((os.path.join(share, parent), sorted(os.path.join(parent, f) for f in files)))
    return entries


setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(include=[package_name, f"{package_name}.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
        (f"share/{package_name}/launch", glob("launch/*.launch.py")),
        (f"share/{package_name}/config", glob("config/*.yaml") + glob("config/*.json")),
        # The trained demo policies: the shipped configs name them as models/demo and models/aloha (found from
        # any directory).
        *_tree("models/demo", f"share/{package_name}"),
        *_tree("models/aloha", f"share/{package_name}"),
        (f"share/{package_name}/config/robots", glob("config/robots/*.yaml")),
    ],
    install_requires=["setuptools"],
    # oxygen-sim eval --ray, oxygen-replay eval --ray (requirements-ray.txt pins the version the tests run)
    extras_require={"ray": ["ray>=2.60,<3"]},
    zip_safe=True,
    maintainer="oxygen_ros developers",
    maintainer_email="oxygen-ros@example.com",
    description="Multi-task pi0.5 VLA inference for ROS 2 with shared prefill and cross-frame batched decoding",
    license="Apache-2.0",
    python_requires=">=3.10",
    entry_points={
        "console_scripts": [
            "oxygen_node = oxygen_ros.ros.main:main",
            "oxygen_lifecycle_node = oxygen_ros.ros.main:lifecycle_main",
            "oxygen-bench = oxygen_ros.bench.cli:main",
            "oxygen-replay = oxygen_ros.replay.cli:main",
            "oxygen-sim = oxygen_ros.apps.oxygen_sim:main",
            "oxygen-serve = oxygen_ros.serve.cli:main",
            "oxygen-ctl = oxygen_ros.ros.ctl:main",
            "oxygen_sim_node = oxygen_ros.sim_ros.main:main",
            "oxygen-train-demo = oxygen_ros.train.cli:main",
        ],
    },
)
