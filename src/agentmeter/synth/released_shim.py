"""A stand-in for the released benchmark's ``BaseRepoAdapter`` module (``BaseRepoAdapter``,
``TestCase``, ``FuzzHelper``) and ``DiffTestEngine``, so that a released ``start.py`` imports and
its ``generate_test_cases()`` runs without Docker (spec §3.2, §3.3 mode 1; used by replay.py).

Written from the interface the spec describes, not copied: same names, fields, defaults and
generator signatures; the generators draw from the global ``random`` module as the released ones
do, so ``random.seed(seed)`` makes a replay reproducible. Nothing here installs or runs a tool:
``install_*`` are the adapter's own (never called) and constructing ``DiffTestEngine`` fails.
"""

from __future__ import annotations

import json
import random
import re
import string
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

_ANSI = re.compile(r"\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")
_ALNUM = string.ascii_letters + string.digits


class FuzzHelper:
    """Random values for case generators (the released helper's method names and arguments)."""

    @staticmethod
    def get_string(min_len: int = 5, max_len: int = 20, chars: str = _ALNUM) -> str:
        n = random.randint(min_len, max_len)
        return "".join(random.choice(chars) for _ in range(n))

    @staticmethod
    def get_int(min_val: int = -1000, max_val: int = 10000) -> int:
        return random.randint(min_val, max_val)

    @staticmethod
    def get_float(min_val: float = -100.0, max_val: float = 100.0, decimals: int = 2) -> float:
        return round(random.uniform(min_val, max_val), decimals)

    @staticmethod
    def get_boolean_str() -> str:
        return random.choice(["true", "false", "1", "0", "True", "False"])

    @staticmethod
    def get_domain() -> str:
        labels = [FuzzHelper.get_string(3, 8, string.ascii_lowercase)
                  for _ in range(random.randint(2, 4))]
        return ".".join(labels) + random.choice([".com", ".net", ".org", ".io"])

    @staticmethod
    def get_ip(v6: bool = False) -> str:
        if v6:
            return ":".join(format(random.randint(0, 0xFFFF), "x") for _ in range(8))
        return ".".join(str(random.randint(0, 255)) for _ in range(4))

    @staticmethod
    def get_url() -> str:
        scheme = random.choice(["http", "https", "ftp"])
        return f"{scheme}://{FuzzHelper.get_domain()}/{FuzzHelper.get_string(5, 10)}"

    @staticmethod
    def get_email() -> str:
        return f"{FuzzHelper.get_string(5, 10, string.ascii_lowercase)}@{FuzzHelper.get_domain()}"

    @staticmethod
    def get_filepath(ext: str = ".txt", absolute: bool = True) -> str:
        dirs = [FuzzHelper.get_string(4, 8, string.ascii_lowercase)
                for _ in range(random.randint(1, 3))]
        name = FuzzHelper.get_string(5, 10) + ext
        return ("/" if absolute else "") + "/".join([*dirs, name])

    @staticmethod
    def get_json_string(num_keys: int = 5) -> str:
        data: dict[str, Any] = {FuzzHelper.get_string(5, 10): FuzzHelper.get_string(10, 20)
                                for _ in range(num_keys)}
        data["id"] = FuzzHelper.get_int(1, 1000)
        data["active"] = random.choice([True, False])
        return json.dumps(data)

    @staticmethod
    def get_csv_string(rows: int = 10, cols: int = 3) -> str:
        header = ",".join(FuzzHelper.get_string(4, 8) for _ in range(cols))
        body = [",".join(FuzzHelper.get_string(5, 15) for _ in range(cols)) for _ in range(rows)]
        return "\n".join([header, *body])

    @staticmethod
    def get_subdomains_content(min_lines: int = 10, max_lines: int = 100) -> str:
        n = random.randint(min_lines, max_lines)
        return "\n".join(FuzzHelper.get_domain() for _ in range(n))

    @staticmethod
    def get_evil_string() -> str:
        return random.choice(["", " ", "\n", "\r\n", "\t", "\x00", "../../etc/passwd",
                              "'; DROP TABLE users; --", "`reboot`", "A" * 100, "中文测试🚀",
                              "-1", "9" * 28])


@dataclass
class TestCase:
    """One generated case, as the released adapters build them."""

    __test__ = False  # not a pytest test class

    command: str
    category: str = "UNKNOWN"
    prep_script: str = ""
    mount_files: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)


class BaseRepoAdapter(ABC):
    """The adapter base class; subclasses define generate_test_cases (the rest is unused here)."""

    @property
    @abstractmethod
    def base_image(self) -> str: ...

    @property
    def repo_root_dir(self) -> str:
        return "/repo"

    @property
    def work_repo_dir_name(self) -> str:
        return "repo_to_be_tested"

    @property
    def work_repo_dir(self) -> str:
        return f"{self.repo_root_dir.rstrip('/')}/{self.work_repo_dir_name}"

    @property
    def test_data_dir(self) -> str:
        return "/test_data"

    def sanitize_stdout(self, raw_stdout: str) -> str:
        return _ANSI.sub("", raw_stdout)

    @abstractmethod
    def install_oracle(self, container: Any) -> None: ...

    @abstractmethod
    def install_agent(self, container: Any, local_agent_path: str) -> None: ...

    @abstractmethod
    def generate_test_cases(self) -> list[TestCase]: ...


class DiffTestEngine:
    """Constructing the engine is refused: a replay only generates cases."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("start.py replay: the differential engine is not available here")
