import pytest

pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _few_threads():
    # the test machine has 2 shared cores; tiny models are faster single-threaded anyway
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
