/**
 * The notebook commands: insert a `%%custom_gradient` cell (the seeds'
 * log1pexp) and re-check every `%%custom_gradient` cell of a notebook.
 */
import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

import { LOAD_EXTENSION, TEMPLATE, isCustomGradientCell, loadsGradmagic } from './cells';

function sources(panel: NotebookPanel): string[] {
  return panel.content.widgets.map(cell => cell.model.sharedModel.getSource());
}

function insertCodeCellBelow(panel: NotebookPanel, source: string): void {
  const notebook = panel.content;
  NotebookActions.insertBelow(notebook);
  NotebookActions.changeCellType(notebook, 'code');
  notebook.activeCell!.model.sharedModel.setSource(source);
}

/** Below the active cell: a `%load_ext gradmagic` cell if no cell loads it, then the log1pexp template. */
export function insertCustomGradientCell(panel: NotebookPanel): void {
  if (!loadsGradmagic(sources(panel))) {
    insertCodeCellBelow(panel, LOAD_EXTENSION);
  }
  insertCodeCellBelow(panel, TEMPLATE);
  panel.content.mode = 'edit';
}

/**
 * Run every `%%custom_gradient` cell of the notebook, in order, after loading gradmagic in the kernel
 * (quietly: after a kernel restart the magic exists again without re-running the `%load_ext` cell).
 * Resolves to the number of cells run.
 */
export async function recheckAll(panel: NotebookPanel): Promise<number> {
  const cells = panel.content.widgets.filter(
    cell => cell.model.type === 'code' && isCustomGradientCell(cell.model.sharedModel.getSource())
  );
  if (!cells.length) {
    return 0;
  }
  const kernel = panel.sessionContext.session?.kernel;
  if (kernel) {
    await kernel.requestExecute({
      code: "get_ipython().extension_manager.load_extension('gradmagic')",
      silent: true,
      store_history: false
    }).done;
  }
  await NotebookActions.runCells(panel.content, cells, panel.sessionContext);
  return cells.length;
}
