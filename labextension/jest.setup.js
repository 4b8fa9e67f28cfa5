// What jsdom lacks and Lumino needs at import time (JupyterLab's own test setup adds the same).
globalThis.DragEvent ??= class DragEvent extends MouseEvent {};
globalThis.requestAnimationFrame ??= callback => setTimeout(callback, 0);
