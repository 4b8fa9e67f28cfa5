"""gradmagic: write, check and explain custom gradients in Jupyter.

In IPython or Jupyter::

    %load_ext gradmagic

then a ``%%custom_gradient`` cell turns its code into a ``tf.custom_gradient``
op bound in the notebook (see ``%custom_gradient?``).

Loading the extension imports no framework: TensorFlow is imported the first
time a magic needs it.
"""

__version__ = "0.1.0"


def load_ipython_extension(ipython):
    """Register gradmagic's magics (``%load_ext gradmagic``); loading twice is harmless."""
    from gradmagic.magics import GradientMagics

    if GradientMagics.__name__ not in ipython.magics_manager.registry:
        ipython.register_magics(GradientMagics)


def unload_ipython_extension(ipython):
    """Remove gradmagic's magics (``%unload_ext gradmagic``)."""
    from gradmagic.magics import GradientMagics

    GradientMagics.unregister(ipython)
