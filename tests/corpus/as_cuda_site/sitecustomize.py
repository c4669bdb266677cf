"""``--provider cuda`` on a machine without a GPU, for tests/corpus/test_cuda_worker.py: put first on PYTHONPATH with
``ATTNVIZ_TEST_AS_CUDA`` naming a folder, every process of the command (driver, pool workers, isolation child) makes
a CPU session where a CUDA one is asked for, which says it runs on ``CUDAExecutionProvider`` (so the statistics
graph is laid out for CUDA, and in-process runs take the page-locked outputs' path, refused without CUDA: outputs
bound to "cpu" as there), and logs each session it makes into ``<folder>/<pid>.log``: the provider asked for and
whether it is a statistics session (its graph fetches the statistics) or the model's own.  onnxruntime's optimised
graph is not kept for such a session, as for a real CUDA one (runtime/session.py keeps it only on the CPU).
Only the check that stands in for the GPU changes: every decision above it runs as on a GPU machine.
``ATTNVIZ_TEST_CUDA_GONE=1``: every CUDA session is refused as runtime/session.py refuses one where CUDA is not
usable.  Without ``ATTNVIZ_TEST_AS_CUDA`` it does nothing."""

import os

if os.environ.get("ATTNVIZ_TEST_AS_CUDA"):
    from attnviz.runtime import session as _session

    _real = _session.make_session

    class _AsCuda:
        """A CPU session that says it runs on CUDA (everything else is the session's own)."""

        def __init__(self, sess):
            self._sess = sess

        def get_providers(self):
            return ["CUDAExecutionProvider", "CPUExecutionProvider"]

        def get_provider_options(self):
            return {"CUDAExecutionProvider": {"device_id": "0", "use_tf32": "0"}}

        def __getattr__(self, name):
            return getattr(self._sess, name)

    def _make_session(model, provider="auto", *args, **kwargs):
        if provider != "cuda":
            return _real(model, provider, *args, **kwargs)
        if os.environ.get("ATTNVIZ_TEST_CUDA_GONE"):  # CUDA unusable since the last command: session.py's refusal
            from attnviz import AttnvizError

            raise AttnvizError(
                "CUDA was requested but onnxruntime could not use it (CUDA/cuDNN libraries missing or no GPU); "
                "use --provider cpu, or install the CUDA 12/13 runtime wheels"
            )
        kwargs["optimized"] = None
        sess, note = _real(model, "cpu", *args, **kwargs)
        what = "stats" if isinstance(model, bytes) and b"attnviz_stat_sums" in model else "model"
        with open(os.path.join(os.environ["ATTNVIZ_TEST_AS_CUDA"], f"{os.getpid()}.log"), "a") as f:
            f.write(f"{provider} {what}\n")
        return _AsCuda(sess), note

    _session.make_session = _make_session
