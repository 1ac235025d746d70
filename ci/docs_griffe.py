"""Griffe extensions for the API reference (mkdocs.yml; the build's only Python of its own).

- `interop.convert` is built at import time (`make_convert`: the fast path's front, carrying
  `_convert`'s signature and docstring), so static analysis sees an attribute: it is documented
  as the function its callers see.
- The code documents attributes and fields with `#:` comments above them (as Sphinx reads
  them); griffe reads only string literals, so such a comment becomes the docstring.
"""

from __future__ import annotations

from typing import Any

import griffe


class InteropDocs(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "interop":
            return
        api = pkg["api"]
        words = api["_convert"]
        convert = griffe.Function(
            "convert",
            lineno=words.lineno,
            endlineno=words.endlineno,
            parameters=words.parameters,
            returns=words.returns,
            docstring=words.docstring,
        )
        api.set_member("convert", convert)

    def on_attribute(self, *, attr: griffe.Attribute, **kwargs: Any) -> None:
        if attr.docstring is not None or attr.lineno is None:
            return
        try:
            lines = attr.lines_collection[attr.filepath]  # type: ignore[index]
        except (KeyError, TypeError):
            return
        comment: list[str] = []
        at = attr.lineno - 2  # the line above the attribute, 0-based
        while at >= 0 and lines[at].lstrip().startswith("#:"):
            comment.insert(0, lines[at].lstrip()[2:].strip())
            at -= 1
        if comment:
            attr.docstring = griffe.Docstring(" ".join(comment), parent=attr)
