"""A griffe extension for the API reference (mkdocs.yml loads it): pixelpipe's docstrings head
their doctests "Example:", which griffe's Google parser does not know (it knows "Examples:"),
so it would render them as Markdown, where `>>>` is a quotation. This reads "Example:" as
"Examples:"; the docstrings themselves stay as they are."""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        doc = obj.docstring
        if doc is not None and "Example:" in doc.value:
            doc.value = _HEADING.sub(r"\1Examples:", doc.value)
