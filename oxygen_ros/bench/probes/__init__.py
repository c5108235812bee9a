"""One-off floor probes of the benchmark: each times one piece alone (python -m oxygen_ros.bench.probes.<name>);
docs/performance.md cites their figures."""
