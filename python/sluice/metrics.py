"""A pipeline's counters for Prometheus and TensorBoard.

    import prometheus_client, sluice.metrics
    ds = sluice.torch.Dataset("spec.yaml")
    sluice.metrics.register(ds)              # the default registry
    prometheus_client.start_http_server(9100)

    writer = torch.utils.tensorboard.SummaryWriter()
    for step, batch in enumerate(loader):
        ...
        if step % 100 == 0:
            sluice.metrics.add_scalars(writer, ds, step)

The numbers are those of ``stats()`` (``sluice.Pipeline`` or
``sluice.torch.Dataset``), read when Prometheus scrapes or when
``add_scalars`` is called; the names are those ``sluice run
--metrics-port`` serves. The stall meter is the part to watch: how long
the training loop waited for batches (``sluice_consumer_wait_seconds``,
``sluice_consumer_stalls``) and how much slack the pipeline had
(``sluice_consumer_headspace_seconds``). Uses Debian's
python3-prometheus-client; nothing here is needed to run a pipeline.
"""
from typing import Any, Dict, Iterator, Optional, Protocol

__all__ = ["PrometheusCollector", "register", "add_scalars", "scalars"]


class _HasStats(Protocol):
    def stats(self) -> Dict[str, Any]: ...


def scalars(stats: Dict[str, Any]) -> Dict[str, float]:
    """The stall meter and throughput of ``stats()`` as flat
    ``{"sluice/name": value}`` scalars (what ``add_scalars`` logs)."""
    c = stats["consumer"]
    return {
        "sluice/outputs": float(stats["outputs"]),
        "sluice/records": float(stats["records"]),
        "sluice/consumer_first_wait_seconds": c["first_wait_seconds"],
        "sluice/consumer_wait_seconds": c["wait_seconds"],
        "sluice/consumer_mean_wait_ms": c["mean_wait_seconds"] * 1e3,
        "sluice/consumer_max_wait_ms": c["max_wait_seconds"] * 1e3,
        "sluice/consumer_stalls": float(c["stalls"]),
        "sluice/consumer_away_seconds": c["away_seconds"],
        "sluice/consumer_headspace_seconds": c["headspace_seconds"],
        "sluice/memory_peak_bytes": float(stats["memory"]["peak"]),
    }


def add_scalars(writer: Any, source: _HasStats, step: int) -> None:
    """Logs ``scalars(source.stats())`` at ``step`` through ``writer``'s
    ``add_scalar`` (``torch.utils.tensorboard.SummaryWriter``, or any
    object with that method)."""
    for name, value in scalars(source.stats()).items():
        writer.add_scalar(name, value, step)


class PrometheusCollector:
    """A prometheus_client collector over ``source.stats()``."""

    def __init__(self, source: _HasStats) -> None:
        self.source = source

    def describe(self) -> Iterator[Any]:
        # Nothing up front: describing would read stats() (and so make the
        # Dataset's pipeline) at registration time.
        return iter(())

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (CounterMetricFamily,
                                            GaugeMetricFamily)
        s = self.source.stats()
        c = s["consumer"]
        base = [s["pipeline"]]

        def counter(name: str, doc: str, value: float) -> Any:
            m = CounterMetricFamily(name, doc, labels=["pipeline"])
            m.add_metric(base, value)
            return m

        def gauge(name: str, doc: str, value: float) -> Any:
            m = GaugeMetricFamily(name, doc, labels=["pipeline"])
            m.add_metric(base, value)
            return m

        yield counter("sluice_outputs", "Outputs (batches) the pipeline "
                      "delivered.", s["outputs"])
        yield counter("sluice_records", "Source records the run went "
                      "through (cache replays included).", s["records"])
        yield counter("sluice_output_bytes", "Bytes of the outputs "
                      "delivered.", s["output_bytes"])
        yield gauge("sluice_epochs_done", "Epochs finished.",
                    s["epochs_done"])
        yield gauge("sluice_consumer_first_wait_seconds", "How long the "
                    "consumer waited for the first output (start-up).",
                    c["first_wait_seconds"])
        yield counter("sluice_consumer_wait_seconds", "Time the consumer "
                      "waited for outputs after the first.",
                      c["wait_seconds"])
        yield gauge("sluice_consumer_max_wait_seconds", "The longest wait "
                    "for one output after the first.", c["max_wait_seconds"])
        yield counter("sluice_consumer_stalls", "Outputs after the first "
                      "the consumer waited for longer than %g s." %
                      c["stall_threshold_seconds"], c["stalls"])
        yield counter("sluice_consumer_away_seconds", "Time the consumer "
                      "spent between outputs (its own work).",
                      c["away_seconds"])
        yield counter("sluice_consumer_headspace_seconds", "Consumer time "
                      "before outputs that were ready without a stall: an "
                      "upper bound on how long the pipeline idled for a "
                      "slow consumer.", c["headspace_seconds"])
        mem = GaugeMetricFamily("sluice_memory_bytes", "Budget accounting: "
                                "bytes reserved now, the peak, the limit "
                                "(0: none), the process's resident set.",
                                labels=["pipeline", "kind"])
        mem.add_metric(base + ["peak"], s["memory"]["peak"])
        mem.add_metric(base + ["limit"], s["memory"]["limit"])
        mem.add_metric(base + ["rss"], s["memory"]["rss"])
        yield mem
        for name, key, doc in (
                ("sluice_stage_read", "read", "Elements a stage read."),
                ("sluice_stage_emitted", "emitted",
                 "Elements a stage passed on."),
                ("sluice_stage_cpu_seconds", "cpu_seconds",
                 "CPU time of a stage's own work.")):
            m = CounterMetricFamily(name, doc, labels=["pipeline", "stage"])
            for st in s["stages"]:
                m.add_metric(base + [st["name"]], st.get(key, 0))
            yield m


def register(source: _HasStats, registry: Optional[Any] = None) -> \
        PrometheusCollector:
    """Registers a collector over ``source`` with ``registry``
    (prometheus_client's default REGISTRY when None) and returns it
    (``registry.unregister(collector)`` removes it)."""
    if registry is None:
        from prometheus_client import REGISTRY
        registry = REGISTRY
    collector = PrometheusCollector(source)
    registry.register(collector)
    return collector
