"""``--engine ray``: the same reduction as Ray Data ``map_batches`` over a callable class that holds the session.

Imported only when asked for, so ``import attnviz.runtime`` never pays for Ray.  One actor per worker, each
with its own onnxruntime session (a GPU actor when the setup has a GPU); partials stream back in batch order.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import numpy as np

from attnviz import AttnvizError


class ReduceActor:
    """Ray Data callable class: built once per actor (opens the model), then called on each block of specs."""

    def __init__(self, setup_blob: bytes):
        self.reducer = pickle.loads(setup_blob).reducer()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = [pickle.dumps(self.reducer(pickle.loads(b))) for b in batch["spec"]]
        return {"batch_id": batch["batch_id"], "partial": np.array(out, dtype=object)}


def _init(setup) -> None:
    import ray

    if ray.is_initialized():
        return
    kw = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if setup.ray_address:
        ray.init(address=setup.ray_address, **kw)
    else:  # a local cluster sized to the workers asked for (Ray would otherwise take every core)
        ray.init(num_cpus=setup.workers * setup.threads, num_gpus=1 if setup.gpu else 0, **kw)


def run(setup, specs) -> Iterator:
    try:
        import ray
        import ray.data
    except ImportError:
        raise AttnvizError("--engine ray needs Ray: pip install 'ray[data]' (or use --engine local)") from None
    if not specs:
        return
    _init(setup)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # partials fold in batch order
    ctx.enable_progress_bars = False  # attnviz draws its own
    blob = pickle.dumps(setup)
    ds = ray.data.from_items(
        [{"batch_id": s.batch_id, "spec": pickle.dumps(s)} for s in specs], override_num_blocks=len(specs)
    )
    out = ds.map_batches(
        ReduceActor,
        fn_constructor_args=(blob,),
        batch_size=1,
        concurrency=setup.workers,
        num_cpus=setup.threads,
        num_gpus=1 if setup.gpu else 0,
        batch_format="numpy",
    )
    for row in out.iter_rows():
        yield pickle.loads(row["partial"])
