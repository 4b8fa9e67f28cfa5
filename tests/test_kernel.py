"""In a real Jupyter kernel: Ctrl-C (an interrupt request) stops a hanging check and the kernel stays usable."""

import queue
import time

import pytest
from conftest import ISOLATED_ENV
from jupyter_client.manager import start_new_kernel


@pytest.fixture
def kernel(tmp_path):
    import os

    manager, client = start_new_kernel(kernel_name="python3", env={**os.environ, **ISOLATED_ENV}, cwd=str(tmp_path))
    yield manager, client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run(client, code: str, timeout: float = 120) -> dict:
    """Execute `code`; return the reply content plus everything it printed or raised."""
    message_id = client.execute(code)
    shown = []
    while True:
        message = client.get_iopub_msg(timeout=timeout)
        if message["parent_header"].get("msg_id") != message_id:
            continue
        content = message["content"]
        if message["msg_type"] == "stream":
            shown.append(content["text"])
        elif message["msg_type"] in ("execute_result", "display_data"):
            shown.append(content["data"].get("text/plain", ""))
        elif message["msg_type"] == "error":
            shown.append(f"{content['ename']}: {content['evalue']}")
        elif message["msg_type"] == "status" and content["execution_state"] == "idle":
            break
    reply = client.get_shell_msg(timeout=timeout)["content"]
    return {**reply, "shown": "".join(shown)}


def test_ctrl_c_interrupts_a_hanging_check_and_the_kernel_stays_usable(kernel):
    manager, client = kernel
    setup = run(
        client,
        """
%load_ext gradmagic
import time
import tensorflow as tf
weights = tf.Variable([1.0, 2.0], name="weights")

def hangs_when_traced(x):
    if not tf.executing_eagerly():  # fine eagerly; hangs when the check compiles it
        time.sleep(3600)
    def grad(dy, variables=None):
        return dy * weights, [dy * x]
    return x * weights, grad
op = tf.custom_gradient(hangs_when_traced)
""",
    )
    assert setup["status"] == "ok", setup["shown"]

    message_id = client.execute("%gradcheck op x=tf.constant([3.0, 4.0])")
    time.sleep(8)  # well into the compiled finite differences
    manager.interrupt_kernel()
    deadline = time.time() + 60
    while True:
        try:
            reply = client.get_shell_msg(timeout=max(1, deadline - time.time()))
        except queue.Empty:
            pytest.fail("the interrupt did not stop the check")
        if reply["parent_header"].get("msg_id") == message_id:
            break
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"

    after = run(client, "print(weights.numpy().tolist(), 40 + 2)")
    assert after["status"] == "ok" and "[1.0, 2.0] 42" in after["shown"]
    again = run(
        client,
        """
def fine(x):
    def grad(dy, variables=None):
        return dy * weights, [dy * x]
    return x * weights, grad
%gradcheck fine x=tf.constant([3.0, 4.0])
""",
    )
    assert again["status"] == "ok" and "passes" in again["shown"], again["shown"]
