from conductor.tasks.task import Task
from conductor.tasks.loader import load_tasks, read_rows

__all__ = ["Task", "load_tasks", "read_rows"]
