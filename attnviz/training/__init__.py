"""Training backend (PyTorch, no Qt): small inspectable transformers, tasks, a generator training loop and a
self-describing ONNX export.

    from attnviz.training.tasks import get_task
    from attnviz.training.loop import Trainer
    from attnviz.training.export import export

    task = get_task("sequence-classification")
    mcfg, tcfg = task.configs("tiny")
    trainer = Trainer(task, mcfg, tcfg, out="runs/seq")
    for ev in trainer.events():          # Progress(step, total, loss, metrics, elapsed, done)
        ...
    export(trainer.model, task, mcfg, tcfg, "runs/seq/model.onnx", evaluate=True)

``attnviz.training.tasks`` documents the task interface; ``attnviz train`` / ``attnviz eval`` wrap this.
"""
