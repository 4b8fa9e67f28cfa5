/**
 * The MIME renderer of `application/vnd.gradmagic.report+json`.
 *
 * It draws the report from the data alone, so a notebook reopened without
 * a kernel, or in a kernel that never made its widget, still shows it. In a
 * notebook whose kernel still holds the report's widget (the bundle carries
 * both), it shows that live widget instead, with its Re-check controls.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Kernel } from '@jupyterlab/services';
import { Panel } from '@lumino/widgets';

import { View, reportView } from './reportview';
import { MIME_TYPE, readReport } from './schema';

export const WIDGET_MIME_TYPE = 'application/vnd.jupyter.widget-view+json';
/** Wins over the `text/html` (50) and `image/png` fallbacks in the same bundle. */
export const FALLBACK_RANK = 40;
/** In notebooks: before the widget view too (-10), which this renderer shows itself while its widget lives. */
export const NOTEBOOK_RANK = -20;

/** Where the live widget of a report can come from: the notebook's kernel and renderers. */
export interface ILiveWidgets {
  /** The kernel connection of the notebook, if any. */
  kernel(): Kernel.IKernelConnection | null | undefined;
  /** A renderer for the widget view, from the notebook's own registry (which has its widget manager). */
  createWidgetRenderer(): IRenderMime.IRenderer;
}

export class ReportRenderer extends Panel implements IRenderMime.IRenderer {
  constructor(
    _options: IRenderMime.IRendererOptions,
    private readonly live?: ILiveWidgets
  ) {
    super();
    this.addClass('jp-gradmagic-renderer');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const view = model.data[WIDGET_MIME_TYPE] as { model_id?: string } | undefined;
    const kernel = this.live?.kernel();
    this.widgets.slice().forEach(child => child.dispose());
    if (view?.model_id && kernel && kernel.hasComm(view.model_id)) {
      // The kernel still holds this report's widget: show it, live.
      const renderer = this.live!.createWidgetRenderer();
      this.node.replaceChildren();
      this.addWidget(renderer);
      await renderer.renderModel(model);
      return;
    }
    const report = readReport(model.data[MIME_TYPE]);
    if (report instanceof Error) {
      const message = document.createElement('div');
      message.className = 'jp-gradmagic-error';
      message.textContent = report.message;
      this.node.replaceChildren(message);
      return;
    }
    const metadata = (model.metadata[MIME_TYPE] ?? {}) as { view?: View };
    this.node.replaceChildren(reportView(report, metadata.view === 'graph' ? 'graph' : 'report'));
  }
}

/** A renderer factory; with `live`, one that shows a report's live widget while its kernel holds it. */
export function reportRendererFactory(live?: ILiveWidgets): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [MIME_TYPE],
    defaultRank: live ? NOTEBOOK_RANK : FALLBACK_RANK,
    createRenderer: options => new ReportRenderer(options, live)
  };
}
