from conductor.tasks.loader import load_datasets, load_tasks, read_rows
from conductor.tasks.task import Task

__all__ = ["Task", "load_datasets", "load_tasks", "read_rows"]
