"""A GPU machine on one without a GPU, for tests/corpus/test_cuda_worker.py and test_auto_worker.py: put first on
PYTHONPATH, it changes every process of the command (driver, pool workers, isolation child) as the variables say.

``ATTNVIZ_TEST_GPU=1``: an NVIDIA GPU is present (``isolation.gpu_present``).

``ATTNVIZ_TEST_AS_CUDA`` naming a folder: onnxruntime is a GPU build (``ort_build.installed`` lists the CUDA
provider's library), and each session that would run on CUDA (``--provider cuda``; ``auto`` with a GPU present) is a
CPU session which says it runs on ``CUDAExecutionProvider`` (so the statistics graph is laid out for CUDA, and
in-process runs take the page-locked outputs' path, refused without CUDA: outputs bound to "cpu" as there).
Each session made is logged into ``<folder>/<pid>.log``: the provider asked for and whether it is a statistics
session (its graph fetches the statistics) or the model's own, then " on cpu" for a session that runs on the CPU
and " refused" for one refused.  onnxruntime's optimised graph is not kept for a session that asked for CUDA, as
runtime/session.py keeps it only for a session that never tried.  Only the checks that stand in for the GPU change:
every decision above them runs as on a GPU machine.

``ATTNVIZ_TEST_CUDA_GONE=1``: CUDA is not usable (its libraries missing, the GPU gone): a ``cuda`` session is refused
as runtime/session.py refuses it, and ``auto`` lands on the CPU with session.py's note.
``ATTNVIZ_TEST_CPU_BUILD=1``: onnxruntime is a CPU-only build (the real one here): ``auto`` lands on the CPU.
``ATTNVIZ_TEST_ORT_BUILD=TAG``: another GPU build (its CUDA library named with TAG), as after a reinstall.
Without these variables it does nothing."""

import os

if os.environ.get("ATTNVIZ_TEST_GPU"):
    from attnviz.runtime import isolation as _isolation

    _isolation.gpu_present = lambda: True  # (before session.py imports it by name)

if os.environ.get("ATTNVIZ_TEST_AS_CUDA"):
    from attnviz.runtime import isolation as _isolation
    from attnviz.runtime import session as _session

    _real = _session.make_session
    _gpu_build = not os.environ.get("ATTNVIZ_TEST_CPU_BUILD")
    try:
        from attnviz.runtime import ort_build as _ort_build
    except ImportError:  # (a checkout from before runtime/ort_build.py: bench/corpus_timeline.py --other-root)
        _ort_build = None
    if _ort_build is not None:
        _real_build = _ort_build.installed

        def _installed():
            build = _real_build()
            if build is None or not _gpu_build:
                return build
            tag = os.environ.get("ATTNVIZ_TEST_ORT_BUILD", "")
            return [*build[:4], sorted([*build[4], [f"lib{_ort_build.CUDA_LIBRARY}.so{tag}", 1, 0]])]

        _ort_build.installed = _installed

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

    def _log(line):
        with open(os.path.join(os.environ["ATTNVIZ_TEST_AS_CUDA"], f"{os.getpid()}.log"), "a") as f:
            f.write(line + "\n")

    def _make_session(model, provider="auto", *args, **kwargs):
        what = "stats" if isinstance(model, bytes) and b"attnviz_stat_sums" in model else "model"
        tries = provider == "cuda" or (provider == "auto" and _gpu_build and _isolation.gpu_present())
        if not tries:
            sess, note = _real(model, provider, *args, **kwargs)
            _log(f"{provider} {what} on cpu")
            return sess, note
        kwargs["optimized"] = None
        if os.environ.get("ATTNVIZ_TEST_CUDA_GONE"):  # CUDA unusable since the last command: session.py's answer
            if provider == "cuda":
                from attnviz import AttnvizError

                _log(f"{provider} {what} refused")
                raise AttnvizError(
                    "CUDA was requested but onnxruntime could not use it (CUDA/cuDNN libraries missing or no GPU); "
                    "use --provider cpu, or install the CUDA 12/13 runtime wheels"
                )
            sess, _ = _real(model, "cpu", *args, **kwargs)
            _log(f"{provider} {what} on cpu")
            return sess, "CUDA provider unavailable (no GPU or CUDA libraries); running on CPU"
        sess, note = _real(model, "cpu", *args, **kwargs)
        _log(f"{provider} {what}")
        return _AsCuda(sess), note

    _session.make_session = _make_session
