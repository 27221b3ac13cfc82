"""Task specs (YAML like GPU MODE's task.yml), their reference modules and input generators."""

from harness.tasks.spec import (
    SHAPE_SETS,
    Shape,
    TaskSpec,
    combine_seeds,
    known_tasks,
    load_reference,
    load_task,
    revision_secret,
    use_task,
)

__all__ = [
    "SHAPE_SETS",
    "Shape",
    "TaskSpec",
    "combine_seeds",
    "known_tasks",
    "load_reference",
    "load_task",
    "revision_secret",
    "use_task",
]
