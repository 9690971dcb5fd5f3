"""The local executor: plays the JobSet controller, the Job controller and the kubelets against
a Kubernetes API server, running each pod's containers as local processes (JAX on CPU).

    from tpujob.local.executor import Executor

    with Executor(api_url_or_kubeconfig, workdir, namespace="default",
                  cpu_devices_per_process=1) as executor:
        ...  # JobSets created through the API now run here
        print(executor.read_log("default", "<pod>"))

See docs/local-executor.md for what it emulates and where it differs from the real controllers.
"""

from .client import ApiError, KubeApi
from .executor import Executor
from .settings import ExecutorSettings

__all__ = ["ApiError", "Executor", "ExecutorSettings", "KubeApi"]
