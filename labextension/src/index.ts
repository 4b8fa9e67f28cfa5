/**
 * gradmagic's JupyterLab extension: the report renderer, and two notebook
 * commands (palette and notebook toolbar).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { INotebookModel, INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { CommandToolbarButton } from '@jupyterlab/ui-components';
import { DisposableDelegate, IDisposable } from '@lumino/disposable';

import { insertCustomGradientCell, recheckAll } from './commands';
import { nablaIcon } from './icon';
import { WIDGET_MIME_TYPE, reportRendererFactory } from './renderer';
import { VIEW_KEY, viewRegistry } from './stub';
import { render } from './widget';

export const COMMAND_INSERT = 'gradmagic:insert-custom-gradient-cell';
export const COMMAND_RECHECK = 'gradmagic:recheck-all';
const CATEGORY = 'gradmagic';

/** Each notebook's own renderer: it can show a report's live widget through the notebook's widget manager. */
class NotebookRenderers implements DocumentRegistry.IWidgetExtension<NotebookPanel, INotebookModel> {
  constructor(private readonly app: JupyterFrontEnd) {}

  createNew(panel: NotebookPanel): IDisposable {
    const rendermime = panel.content.rendermime;
    rendermime.addFactory(
      reportRendererFactory({
        kernel: () => panel.sessionContext.session?.kernel,
        createWidgetRenderer: () => rendermime.createRenderer(WIDGET_MIME_TYPE)
      })
    );
    const buttons = [
      [COMMAND_INSERT, 'Custom gradient'],
      [COMMAND_RECHECK, 'Re-check all']
    ].map(([id, label]) => new CommandToolbarButton({ commands: this.app.commands, id, label }));
    buttons.forEach((button, i) => panel.toolbar.insertItem(10 + i, `gradmagic-${i}`, button));
    return new DisposableDelegate(() => buttons.forEach(button => button.dispose()));
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'gradmagic:plugin',
  description: "Renders gradmagic's custom-gradient reports; inserts and re-checks custom-gradient cells.",
  autoStart: true,
  requires: [IRenderMimeRegistry, INotebookTracker],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    rendermime: IRenderMimeRegistry,
    notebooks: INotebookTracker,
    palette: ICommandPalette | null
  ) => {
    rendermime.addFactory(reportRendererFactory());
    // The live widgets' view: each widget's model carries only a stub, which finds the view here (elsewhere, in VS
    // Code say, it asks the kernel for it once per page).
    viewRegistry()[VIEW_KEY] = { render };
    const active = (): NotebookPanel | null => notebooks.currentWidget;
    app.commands.addCommand(COMMAND_INSERT, {
      label: 'Insert custom-gradient cell',
      icon: nablaIcon,
      caption: 'Insert a %%custom_gradient cell (log1pexp) below the active cell, and %load_ext gradmagic if needed',
      isEnabled: () => active() !== null,
      execute: () => {
        const panel = active();
        if (panel) {
          insertCustomGradientCell(panel);
        }
      }
    });
    app.commands.addCommand(COMMAND_RECHECK, {
      label: 'Re-check all custom-gradient cells',
      icon: nablaIcon,
      caption: 'Run every %%custom_gradient cell of the notebook',
      isEnabled: () => active() !== null,
      execute: () => {
        const panel = active();
        return panel ? recheckAll(panel) : 0;
      }
    });
    for (const command of [COMMAND_INSERT, COMMAND_RECHECK]) {
      palette?.addItem({ command, category: CATEGORY });
    }
    app.docRegistry.addWidgetExtension('Notebook', new NotebookRenderers(app));
  }
};

export default plugin;
