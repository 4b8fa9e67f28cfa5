/**
 * The MIME renderer of `application/vnd.gradmagic.report+json` in JupyterLab and Notebook 7.
 *
 * While the kernel holds the report's widget (its model id travels in the output's metadata), it shows that
 * widget: the live view, with its controls, through the notebook's own widget manager. Otherwise (a notebook
 * reopened without a kernel, or the report of a kernel that made no widget) it draws the same view from the
 * data alone.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Kernel } from '@jupyterlab/services';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { Panel } from '@lumino/widgets';

import { readReport, readWatchReport } from './data';
import { View, reportView } from './reportview';
import { MIME_TYPE, WATCH_MIME_TYPE } from './schema';
import { watchView } from './watchview';
import { REPORT_EVENT } from './widget';

export const WIDGET_MIME_TYPE = 'application/vnd.jupyter.widget-view+json';
/** Wins over the `text/html` (50) fallback in the same bundle. */
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

/** The output's metadata for the report: the view to draw, and the model id of its live widget. */
interface IReportMetadata {
  view?: View;
  model_id?: string;
}

/** The id of the report's live widget, from the output's metadata (or a widget view in the same bundle). */
export function liveModelId(model: IRenderMime.IMimeModel): string | null {
  const metadata = (model.metadata[MIME_TYPE] ?? model.metadata[WATCH_MIME_TYPE] ?? {}) as IReportMetadata;
  const view = model.data[WIDGET_MIME_TYPE] as { model_id?: string } | undefined;
  return metadata.model_id ?? view?.model_id ?? null;
}

/** The output a widget renderer reads: the view of the widget model `modelId`. */
function widgetView(modelId: string): IRenderMime.IMimeModel {
  return {
    trusted: true,
    data: { [WIDGET_MIME_TYPE]: { model_id: modelId, version_major: 2, version_minor: 1 } },
    metadata: {},
    setData: () => undefined
  };
}

export class ReportRenderer extends Panel implements IRenderMime.IRenderer {
  /** The output shown live, whose data takes the re-checked reports its widget sends up. */
  private shown: IRenderMime.IMimeModel | null = null;

  constructor(
    _options: IRenderMime.IRendererOptions,
    private readonly live?: ILiveWidgets
  ) {
    super();
    this.addClass('jp-gradmagic-renderer');
    this.node.addEventListener(REPORT_EVENT, event => {
      const data = (event as CustomEvent<ReadonlyPartialJSONObject>).detail;
      this.shown?.setData({ data: { ...this.shown.data, ...data }, metadata: this.shown.metadata });
    });
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const modelId = liveModelId(model);
    const kernel = this.live?.kernel();
    this.shown = null;
    this.widgets.slice().forEach(child => child.dispose());
    if (modelId && kernel && kernel.hasComm(modelId)) {
      // The kernel still holds this report's widget: show it, live. A re-check there sends its new report up;
      // the output's data takes it (and the static fallbacks), so the notebook saves what the user sees.
      const renderer = this.live!.createWidgetRenderer();
      this.node.replaceChildren();
      this.addWidget(renderer);
      this.shown = model;
      await renderer.renderModel(widgetView(modelId));
      return;
    }
    if (model.data[WATCH_MIME_TYPE] !== undefined && model.data[MIME_TYPE] === undefined) {
      // A watch's report: its table of ops, each op's report under its row, drawn by the same view.
      const watch = readWatchReport(model.data[WATCH_MIME_TYPE]);
      const shown = watch instanceof Error ? document.createElement('div') : watchView(watch);
      if (watch instanceof Error) {
        shown.className = 'jp-gradmagic-error';
        shown.textContent = watch.message;
      }
      this.node.replaceChildren(shown);
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
    const metadata = (model.metadata[MIME_TYPE] ?? {}) as IReportMetadata;
    this.node.replaceChildren(reportView(report, metadata.view === 'graph' ? 'graph' : 'report'));
  }
}

/** A renderer factory; with `live`, one that shows a report's live widget while its kernel holds it. */
export function reportRendererFactory(live?: ILiveWidgets): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [MIME_TYPE, WATCH_MIME_TYPE],
    defaultRank: live ? NOTEBOOK_RANK : FALLBACK_RANK,
    createRenderer: options => new ReportRenderer(options, live)
  };
}
