"""``--provider auto`` (attnviz's default) on a machine with a GPU: a corpus worker runs where ``auto`` landed the last
time (runtime/device.py), as ``cuda`` or ``cpu`` would, reading back what earlier commands kept (no onnx
imported, no model opened or probed, one session), where before it opened and probed the model at every command.

No GPU here: tests/corpus/as_cuda_site makes every process of a command see one (``ATTNVIZ_TEST_GPU``) and, as a GPU
build of onnxruntime, stands a CPU session that says it runs on CUDA in for each session that would run on CUDA;
it logs each session made (provider asked for, the model's or the statistics', where it ran).  The bytes of
heads.parquet and examples.parquet are compared with a ``--provider cpu`` command's on the same machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz.corpus import engines
from attnviz.runtime import device as runtime_device
from attnviz.runtime import isolation, light_model, ort_build

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
OUTPUTS = ("heads.parquet", "examples.parquet")

CODE = f"""
import sys
sys.path.insert(0, {str(HERE)!r}); sys.path.insert(0, {str(HERE.parent)!r})
from pathlib import Path
from attnviz.corpus import engines
import worker_modules
seen = []
worker_modules.watch_close(engines, seen)
from attnviz.cli import main
d = Path(sys.argv[1])
if not (d / 'm.onnx').exists():
    from planted import planted_model, corpus_lines
    planted_model(d / 'm.onnx')
    (d / 'c.txt').write_text(chr(10).join(corpus_lines(40)))
argv = ['corpus', str(d / 'm.onnx'), '--texts', str(d / 'c.txt'), '--out', str(d / sys.argv[2]), '--no-progress']
given = [] if sys.argv[4] == 'defaults' else ['--workers', '2', '--threads', '1']  # (else the device's defaults)
assert main([*argv, *given, '--provider', sys.argv[3], '--batch-size', '8']) == 0
print(seen)
"""


class Commands:
    """``attnviz corpus`` commands on one model, corpus and cache (each in a fresh interpreter, as a user runs them)."""

    def __init__(self, folder: Path):
        self.folder = folder
        path = os.pathsep.join([str(HERE / "as_cuda_site"), str(ROOT), os.environ.get("PYTHONPATH", "")])
        self.env = {**os.environ, "ATTNVIZ_CACHE_DIR": str(folder / "cache"), "PYTHONPATH": path}
        self.env.pop(engines.LAYOUT_ENV, None)  # the device's own layout
        for name in ("ATTNVIZ_TEST_GPU", "ATTNVIZ_TEST_AS_CUDA", "ATTNVIZ_FORCE_CPU"):
            self.env.pop(name, None)

    def run(
        self, name: str, provider: str = "auto", defaults: bool = False, **variables: str
    ) -> tuple[list, dict[int, list[str]], str]:
        """The pools' processes with the watched modules each had imported when the pool closed, the sessions each
        process made (as_cuda_site's log), and stderr.  ``defaults``: the workers and threads the command chooses for
        the device (else 2 workers × 1 thread)."""
        log = self.folder / f"log_{name}"
        log.mkdir()
        env = {**self.env, **variables}
        if variables:
            env["ATTNVIZ_TEST_AS_CUDA"] = str(log)
        out = subprocess.run(
            [sys.executable, "-c", CODE, str(self.folder), name, provider, "defaults" if defaults else "given"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        seen = eval(out.stdout.strip().splitlines()[-1])
        made = {int(f.stem): f.read_text().split("\n")[:-1] for f in log.glob("*.log")}
        return seen, made, out.stderr

    def outputs(self, name: str) -> list[bytes]:
        return [(self.folder / name / f).read_bytes() for f in OUTPUTS]


GPU = {"ATTNVIZ_TEST_GPU": "1"}


def test_auto_that_landed_on_cuda_runs_as_cuda_from_the_second_command_and_falls_back_to_the_cpu_when_cuda_fails(
    tmp_path,
):
    """A GPU build on a GPU machine: the first command's worker probes (its session lands on CUDA) and keeps where it
    landed; the second and third commands' worker imports neither onnx nor the model's code and makes one session,
    the statistics one on CUDA (asked for as ``cuda``: it cannot land on the CPU unnoticed).  A record made by
    another onnxruntime build is not believed: that build's first command probes again.  With CUDA unusable since,
    the command still succeeds on the CPU, as ``auto`` did before, with a ``--provider cpu`` command's bytes; the
    record is forgotten and the next command probes again."""
    c = Commands(tmp_path)
    c.run("plain_cpu", "cpu", defaults=True)  # (no GPU: the reference bytes, and the model and corpus made)
    cpu = c.outputs("plain_cpu")
    seen, made = {}, {}
    for name in ("make", "again", "third"):
        seen[name], made[name], _ = c.run(name, **GPU)
    workers = {name: [pid for pid, _ in seen[name][0]] for name in seen}
    assert all(len(w) == 1 and len(seen[n]) == 1 for n, w in workers.items()), seen  # one pool, one process
    assert all(list(m) == workers[n] for n, m in made.items()), (made, workers)  # no session in the driver
    # the first command: the worker probes for the driver (its session lands on CUDA), then the statistics session
    assert made["make"][workers["make"][0]] == ["auto model", "auto stats"], made["make"]
    for name in ("again", "third"):  # later: nothing opened, one CUDA session (before: as the first, every time)
        assert seen[name][0][0][1] == [], seen[name]
        assert made[name][workers[name][0]] == ["cuda stats"], made[name]
    assert c.outputs("make") == c.outputs("again") == c.outputs("third")  # (laid out for CUDA: see below for CPU's)

    # another onnxruntime build since (reinstalled): its first command probes again, its second is light
    seen_b, made_b, _ = c.run("other_build", ATTNVIZ_TEST_ORT_BUILD="-other", **GPU)
    assert list(made_b.values()) == [["auto model", "auto stats"]] and seen_b[0][0][1] != [], (made_b, seen_b)
    seen_b, made_b, _ = c.run("other_again", ATTNVIZ_TEST_ORT_BUILD="-other", **GPU)
    assert list(made_b.values()) == [["cuda stats"]] and seen_b[0][0][1] == [], (made_b, seen_b)

    # CUDA unusable now (libraries gone) while the first build's record says CUDA: the worker's CUDA session is
    # refused before it answers the driver's probe, it opens the model as auto does and its statistics session lands
    # on the CPU, and the driver, told the CPU, plans the CPU's workers and threads (as auto's probe made it do):
    # no error, and a ``--provider cpu`` command's bytes with the device's own defaults
    seen_g, made_g, err = c.run("gone", defaults=True, ATTNVIZ_TEST_CUDA_GONE="1", **GPU)
    first = seen_g[0][0][0]  # the first pool's one process (the GPU's layout), then the CPU's pool
    assert made_g[first] == ["cuda stats refused", "auto stats on cpu"], made_g
    assert len(seen_g) == 2 and all(s.endswith((" on cpu", " refused")) for ss in made_g.values() for s in ss)
    assert "CUDA was requested" not in err and "Traceback" not in err, err
    assert c.outputs("gone") == cpu
    # the record is forgotten: the next command probes (its session lands on the CPU, and so does the run's)
    seen_g, made_g, err = c.run("gone_again", defaults=True, ATTNVIZ_TEST_CUDA_GONE="1", **GPU)
    assert made_g[seen_g[0][0][0]][0] == "auto model on cpu", made_g
    assert all(s.endswith(" on cpu") for ss in made_g.values() for s in ss), made_g
    assert c.outputs("gone_again") == cpu
    # (and CUDA back: that probe landed on the CPU, which a GPU build's record never vouches for: probed again)
    _, made_g, _ = c.run("back", **GPU)
    assert next(iter(made_g.values())) == ["auto model", "auto stats"], made_g


def test_auto_on_a_gpu_machine_with_a_cpu_only_onnxruntime_runs_as_cpu(tmp_path):
    """A CPU-only build (pip's ``onnxruntime``) on a GPU machine lands on the CPU whatever it is asked: the device is
    known before a session exists, so the workers are the CPU's (the process layout) and a second command's worker
    opens nothing and makes only the statistics session; every command writes a ``--provider cpu`` command's
    bytes."""
    c = Commands(tmp_path)
    c.run("plain_cpu", "cpu")
    cpu = c.outputs("plain_cpu")
    seen, made = {}, {}
    for name in ("make", "again", "third"):
        seen[name], made[name], _ = c.run(name, ATTNVIZ_TEST_CPU_BUILD="1", **GPU)
        assert c.outputs(name) == cpu, name
    assert all(len(seen[n]) == 1 and len(seen[n][0]) == 2 for n in seen), seen  # one pool of 2 (processes layout)
    assert any(s == "auto model on cpu" for ss in made["make"].values() for s in ss), made["make"]  # probed
    for name in ("again", "third"):
        assert all(modules == [] for _, modules in seen[name][0]), seen[name]
        # each process that took work made the statistics session only (one of the two may have been left idle)
        assert made[name] and all(ss == ["cpu stats on cpu"] for ss in made[name].values()), made[name]


@pytest.mark.parametrize(
    ("provider", "gpu", "build_has_cuda", "landed", "device"),
    [
        ("cpu", True, True, "cuda", "cpu"),
        ("cuda", False, False, None, "cuda"),  # (no device node: its session is refused in one line)
        ("auto", False, True, "cuda", "cpu"),  # (no GPU: session.py makes CPU sessions; no record read)
        ("auto", True, False, None, "cpu"),  # a CPU-only build
        ("auto", True, True, None, None),  # a GPU build, nothing kept (or it landed on the CPU): only a session tells
        ("auto", True, True, "cuda", "cuda"),  # where it landed on CUDA with this build
    ],
)
def test_where_a_workers_sessions_run_before_one_exists(provider, gpu, build_has_cuda, landed, device, monkeypatch):
    monkeypatch.setattr(isolation, "gpu_present", lambda: gpu)
    build = ["init", 1, 1, None, [["libonnxruntime.so", 1, 1]]]
    if build_has_cuda:
        build[4].append([f"lib{ort_build.CUDA_LIBRARY}.so", 1, 1])
    monkeypatch.setattr(ort_build, "installed", lambda: build)
    asked = []
    monkeypatch.setattr(light_model, "landed", lambda path: asked.append(path) or landed)
    assert runtime_device.before_session("m.onnx", provider) == device
    # the record is only read where nothing else tells
    assert asked == (["m.onnx"] if (provider, gpu, build_has_cuda) == ("auto", True, True) else [])
    assert runtime_device.before_session("m.onnx", provider, kept=False) == (device if not asked else None)


def test_the_build_names_its_cuda_provider_and_changes_with_a_reinstall(tmp_path):
    """runtime/ort_build.py on a stand-in installation folder: a GPU build ships the CUDA provider's library; a
    reinstall of a CPU-only build of the same version (no such library, another build description) is another
    build; an unreadable installation is none."""
    capi = tmp_path / "onnxruntime" / "capi"
    capi.mkdir(parents=True)
    (capi.parent / "__init__.py").write_text("__version__ = '1.32.0'\n")
    (capi / "build_and_package_info.py").write_text("package_name = 'onnxruntime-gpu'\n__version__ = '1.32.0'\n")
    for name in ("libonnxruntime.so.1.32.0", "onnxruntime_pybind11_state.so", "libonnxruntime_providers_cuda.so"):
        (capi / name).write_bytes(b"x")
    (capi / "_pybind_state.py").write_text("")  # (not a library)
    gpu = ort_build.described(capi.parent)
    assert gpu is not None and ort_build.has_cuda(gpu)
    assert [n for n, _, _ in gpu[4]] == sorted(
        ["libonnxruntime.so.1.32.0", "onnxruntime_pybind11_state.so", "libonnxruntime_providers_cuda.so"]
    )
    (capi / "libonnxruntime_providers_cuda.so").unlink()
    (capi / "build_and_package_info.py").write_text("package_name = 'onnxruntime'\n__version__ = '1.32.0'\n")
    cpu = ort_build.described(capi.parent)
    assert cpu is not None and not ort_build.has_cuda(cpu) and cpu != gpu and cpu[3] != gpu[3]
    assert ort_build.described(tmp_path / "elsewhere") is None
    real = ort_build.installed()  # this machine's: pip's CPU-only onnxruntime
    assert real is not None and not ort_build.has_cuda(real)
