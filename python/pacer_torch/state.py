"""User state in pacer's checkpoint: ``pacer.state()`` (python/README.md, "Checkpoints").

A mapping from names to the script's own objects, saved with the model and optimiser
in every checkpoint (on a stop, periodic, or ``save_checkpoint``) and restored with them:

- an object with ``state_dict()`` and ``load_state_dict()`` (an LR scheduler, a
  ``GradScaler``, an EMA model, a metric) is saved as its ``state_dict()`` and restored
  *in place*, by ``load_state_dict``, so the script keeps using the same object;
- any other value (a counter, the best accuracy so far, a list) is saved as it is
  (``torch.save``: picklable) and, on resume, the mapping holds the saved value again:
  read it back from the mapping after the resume (``remaining_epochs`` or the first
  iteration of the ``DataLoader``).

Register everything before the resume. A checkpoint's object state with no object
registered under its name, or a name saved as an object's state and registered now as a
plain value (or the reverse), is a ``ValueError`` naming ``checkpoint`` before anything
is restored.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

#: How an entry is saved: its ``state_dict()`` or the value itself.
OBJECT, VALUE = "state_dict", "value"


def _is_object(v: Any) -> bool:
    return callable(getattr(v, "state_dict", None)) and callable(
        getattr(v, "load_state_dict", None)
    )


class UserState(dict):
    """The job's user state (module docs); a ``dict`` of name -> object or value."""

    def __setitem__(self, name: str, value: Any) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"state: name {name!r} (expected a non-empty string)")
        super().__setitem__(name, value)

    def snapshot(self) -> Dict[str, Tuple[str, Any]]:
        """What a checkpoint keeps: ``name -> (OBJECT, state_dict)`` or ``(VALUE, value)``."""
        return {
            k: (OBJECT, v.state_dict()) if _is_object(v) else (VALUE, v) for k, v in self.items()
        }

    def check(self, saved: Dict[str, Tuple[str, Any]]) -> None:
        """Raises ValueError naming ``checkpoint`` when ``saved`` cannot be restored here."""
        if not isinstance(saved, dict):
            raise ValueError("checkpoint: its user state is not a mapping")
        for name, entry in saved.items():
            if not (isinstance(entry, tuple) and len(entry) == 2 and entry[0] in (OBJECT, VALUE)):
                raise ValueError(f"checkpoint: user state {name!r} is not a saved entry")
            kind = entry[0]
            here = self.get(name)
            if kind == OBJECT and not _is_object(here):
                what = "nothing" if name not in self else f"a plain {type(here).__name__}"
                raise ValueError(
                    f"checkpoint: user state {name!r} holds an object's state_dict, and this "
                    f"run registers {what} under that name (register the object, e.g. "
                    f"pacer.state()[{name!r}] = scheduler, before the resume)"
                )
            if kind == VALUE and _is_object(here):
                raise ValueError(
                    f"checkpoint: user state {name!r} was saved as a plain value, and this run "
                    f"registers a {type(here).__name__} (an object with load_state_dict) there"
                )

    def restore(self, saved: Dict[str, Tuple[str, Any]]) -> None:
        """Restores ``saved`` (``check`` it first): objects in place, values replaced."""
        for name, (kind, v) in saved.items():
            if kind == OBJECT:
                self[name].load_state_dict(v)
            else:
                self[name] = v
