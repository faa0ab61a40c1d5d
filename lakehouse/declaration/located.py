"""YAML with a line for every dotted path, and a collector that reports every problem at once."""

from __future__ import annotations

from typing import Any

import yaml

from lakehouse.errors import PipelineConfigError

# --------------------------------------------------------------------------- YAML with line numbers


class Located:
    """Plain Python values from YAML plus the line of every dotted path, for error messages."""

    def __init__(self, text: str, filename: str) -> None:
        self.lines: dict[str, int] = {}
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark else ""
            raise PipelineConfigError(f"{filename}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
        self.value = self._convert(node, "") if node is not None else None

    def _convert(self, node: yaml.Node, path: str) -> Any:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                # Keys are names: take their text, so YAML 1.1 words (on, no, yes) stay strings.
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.start_mark)
                child = f"{path}.{key}" if path else str(key)
                self.lines[child] = key_node.start_mark.line + 1
                out[key] = self._convert(value_node, child)
                self.lines[child] = key_node.start_mark.line + 1
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._convert(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        loader = yaml.SafeLoader("")
        return loader.construct_object(node)

    def line(self, path: str) -> int:
        while path and path not in self.lines:
            path = path.rsplit(".", 1)[0] if "." in path else ""
        return self.lines.get(path, 1)


class Problems:
    """Collects every problem in a file, then raises them together."""

    def __init__(self, filename: str, located: Located) -> None:
        self.filename = filename
        self.located = located
        self.items: list[tuple[int, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((self.located.line(path), f"{path or '<top>'}: {message}"))

    def raise_if_any(self) -> None:
        if self.items:
            body = "\n".join(f"  {self.filename}:{line}: {msg}" for line, msg in sorted(self.items))
            count = len(self.items)
            raise PipelineConfigError(
                f"{self.filename}: {count} problem{'s' if count > 1 else ''} in the pipeline file; fix "
                f"{'them' if count > 1 else 'it'} before running any job:\n{body}"
            )




def field_error(filename: str | Any, path: str, message: str) -> PipelineConfigError:
    """One problem found after loading (a check that needs Spark), reported as the loader
    reports its own: file, line and field. The line is looked up in the file when it is readable."""
    from pathlib import Path

    try:
        line = Located(Path(filename).read_text(encoding="utf-8"), str(filename)).line(path)
    except (OSError, PipelineConfigError):
        line = 1
    return PipelineConfigError(f"{filename}: 1 problem in the pipeline file; fix it before running any job:\n  {filename}:{line}: {path}: {message}")
