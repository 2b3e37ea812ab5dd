"""The face of ``policies``: the names its docstring says are imported from the package itself."""

from __future__ import annotations

import policies


def test_the_package_docstring_names_every_name_of_its_face_and_each_is_importable() -> None:
    face = (policies.__doc__ or "").split("The face:", 1)[1].split("Everything else", 1)[0]
    assert [name for name in policies.__all__ if f"``{name}``" not in face] == []
    assert all(getattr(policies, name, None) is not None for name in policies.__all__)
