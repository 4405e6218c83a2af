"""OptionsDict: the strict option store behind every `poptorch.Options` namespace.

Behaviour modelled on `python/_options_impl.py` (PopTorch 3.4):
- `set()` asserts that the key exists and that `isinstance(value, type(default))`;
- unknown attributes raise AttributeError("Invalid attribute X.");
- after `_freeze()` (done by trainingModel) any change raises
  AttributeError("Can't modify frozen Options"); deep copies come back unfrozen.
"""

from __future__ import annotations

import copy


class OptionsDict:
    def __init__(self, **default_values):
        self._warnings = {}
        self._warnings_disabled = set()
        self._is_frozen = False
        # _values must be set last: private attributes are only allowed before it.
        self._values = default_values

    # --- the checks ----------------------------------------------------------------------
    def set(self, **kwargs):
        self.checkIsFrozen()
        for option, value in kwargs.items():
            assert self.exists(option), (
                f"Invalid option {option}, valid options are {self._values.keys()}"
            )
            expected = type(self._values[option])
            assert isinstance(value, expected), (
                f"Unexpected type {type(value)} for option {option}. Expected {expected}"
            )
            self._values[option] = value

    def createOrSet(self, **kwargs):
        self.checkIsFrozen()
        for option, value in kwargs.items():
            if option in self._values:
                self.set(**{option: value})
            else:
                self._values[option] = value

    def exists(self, option):
        return option in self._values

    def deleteIfExists(self, option):
        self.checkIsFrozen()
        self._values.pop(option, None)

    def checkIsFrozen(self, option=None):
        if self.__dict__.get("_is_frozen") and option != "_is_frozen":
            raise AttributeError("Can't modify frozen Options")

    # --- freezing ------------------------------------------------------------------------
    def _changeFreezeState(self, state):
        object.__setattr__(self, "_is_frozen", state)
        for value in self.__dict__.values():
            if isinstance(value, OptionsDict):
                value._changeFreezeState(state)
            elif hasattr(value, "_is_frozen"):  # _PopartOptions: frozen with its parent
                value._is_frozen = state

    def _freeze(self):
        self._changeFreezeState(True)

    def _unfreeze(self):
        self._changeFreezeState(False)

    def __deepcopy__(self, memo):
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            object.__setattr__(
                clone, key, False if key == "_is_frozen" else copy.deepcopy(value, memo)
            )
        return clone

    # --- attribute access ----------------------------------------------------------------
    def __setattr__(self, option, value):
        self.checkIsFrozen(option)
        if option.startswith("_"):
            if "_values" in self.__dict__ and option not in self.__dict__:
                raise AttributeError(
                    f"Invalid private attribute {option}. Valid attributes: {list(self.__dict__)}"
                )
            object.__setattr__(self, option, value)
        else:
            self.set(**{option: value})

    def __getattr__(self, option):
        # Only reached when normal lookup fails: methods and properties never get here.
        values = self.__dict__.get("_values", {})
        if option in values:
            return values[option]
        raise AttributeError(f"Invalid attribute {option}.")

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)

    def update(self, other):
        assert not set(self._values).intersection(other), (
            "Can't merge dictionaries, they have some keys in common"
        )
        other.update(self._values)
        return other

    def toDict(self):
        return self.update({})

    def __call__(self, option):
        return getattr(self, option)

    def __repr__(self):
        values = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{type(self).__name__}({values})"
