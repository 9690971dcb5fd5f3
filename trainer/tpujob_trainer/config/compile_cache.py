"""The compile_cache section: JAX's persistent compilation cache, so that a restarted or rerun job
loads its compiled step instead of compiling it again."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

# JAX's own variable for its persistent cache: where it is set (a pod's env, a machine's profile),
# a run with no `directory` of its own uses it, as JAX alone would.
JAX_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"


class CompileCacheConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(True, description="Use JAX's persistent compilation cache.")
    directory: str | None = Field(
        None, min_length=1,
        description="Directory or gs:// prefix of the cache; default: $JAX_COMPILATION_CACHE_DIR "
                    "where it is set, else <output>/compile-cache. "
                    "Shared by every process and every start of the job (and by other jobs "
                    "pointed at it: entries are keyed by the program, devices and JAX version).")
    executables: bool = Field(
        True, description="Also save the compiled training step whole under "
                          "<directory>/executables, so that a restart with the same config, "
                          "code and devices loads it and skips tracing and lowering too.")
    min_compile_time_s: float = Field(
        0.0, ge=0, description="Cache only programs that took at least this long to compile.")

    def resolve_directory(self, output: str, env: Mapping[str, str] | None = None) -> str | None:
        """Where the cache lives for a run writing to `output` in environment `env`; None when
        off."""
        if not self.enabled:
            return None
        return (self.directory or (env or {}).get(JAX_CACHE_ENV)
                or f"{output.rstrip('/')}/compile-cache")
