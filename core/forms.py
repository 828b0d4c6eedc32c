"""What the portal's HTML forms share."""

from __future__ import annotations


class RefuseNotCut:
    """A form mixin: text inputs carry no `maxlength`, since a browser cuts a longer value
    (typed or pasted) to it without a word; the field's `max_length` then refuses it and says
    by how much, so nothing is stored other than what was meant."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():  # type: ignore[attr-defined]
            field.widget.attrs.pop("maxlength", None)
