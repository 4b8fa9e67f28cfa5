/**
 * The report's live view in the kernel's widget (anywidget): this module is bundled on its own
 * (`gradmagic/static/widget.js`). The widget's model carries only a small stub (`stub.ts`), which finds this view
 * once per page: gradmagic's JupyterLab extension registers it in JupyterLab and Notebook 7, and elsewhere (VS Code)
 * the kernel sends the bundle over the widget's comm, once per page; nothing to build or enable. It draws the same
 * view as the JupyterLab extension (`reportview.ts`), with the controls; a request (check again, sweep) goes to the
 * kernel as a message, and the kernel answers by setting the model's `report`, `status` and `controls`, and after a
 * re-check sends the output's new data (the report and its static fallbacks) as a message.
 */
import { ILive, ILiveControls, ILiveStatus, IRecheckRequest, ISweepRequest, ViewState } from './live';
import { readReport, readWatchReport } from './data';
import { View, reportView } from './reportview';
import { watchView } from './watchview';

function errorLine(error: Error): HTMLElement {
  const message = document.createElement('div');
  message.className = 'jp-gradmagic-error';
  message.textContent = error.message;
  return message;
}

/**
 * The DOM event a live view sends up when the kernel re-checked its report: `detail` is the output's new data
 * (the report and its static fallbacks), which the JupyterLab extension saves in the notebook.
 */
export const REPORT_EVENT = 'gradmagic-report';

/** The part of anywidget's model this view uses. */
export interface IWidgetModel {
  get(name: string): unknown;
  on(event: string, callback: (content: unknown) => void): void;
  off(event: string, callback: (content: unknown) => void): void;
  send(content: Record<string, unknown>): void;
}

/** The kernel's message after a re-check: the output's new data (the report, its HTML and text fallbacks). */
interface ISavedMessage {
  gradmagic: 'saved';
  data: Record<string, unknown>;
}

const NO_STATUS: ILiveStatus = { running: false, fraction: 0, message: '', error: false };

/** The live side of the view over the model: its controls and status, and requests sent as messages. */
export function liveOf(model: IWidgetModel): ILive {
  return {
    controls: model.get('controls') as ILiveControls,
    status: (model.get('status') as ILiveStatus | null) ?? NO_STATUS,
    recheck: (request: IRecheckRequest) => model.send({ action: 'recheck', ...request }),
    sweep: (request: ISweepRequest) => model.send({ action: 'sweep', ...request })
  };
}

/**
 * What each widget's views keep of the user's changes, by the widget's `key`: a new view of the same widget (after
 * its output is drawn again) keeps them. anywidget hands each view a model of its own, so the key, not the model,
 * names the widget. The most recent few are kept.
 */
const states = new Map<string, ViewState>();
const KEPT_STATES = 64;

function stateOf(model: IWidgetModel): ViewState {
  const key = String(model.get('key') ?? '');
  const state = states.get(key) ?? new ViewState();
  states.delete(key);
  states.set(key, state); // the most recent last
  if (states.size > KEPT_STATES) {
    states.delete(states.keys().next().value as string);
  }
  return state;
}

/** Draw the model's report into `el`, and again whenever the kernel changes it; returns the clean-up. */
export function render({ model, el }: { model: IWidgetModel; el: HTMLElement }): () => void {
  const state = stateOf(model);
  el.classList.add('jp-gradmagic-widget');
  const draw = (): void => {
    if (model.get('view') === 'watch') {
      // A watch's report: its table, each op's report under its row (no controls: a watch is run again, not
      // re-checked).
      const watch = readWatchReport(model.get('report'));
      el.replaceChildren(watch instanceof Error ? errorLine(watch) : watchView(watch));
      return;
    }
    const report = readReport(model.get('report'));
    if (report instanceof Error) {
      const message = document.createElement('div');
      message.className = 'jp-gradmagic-error';
      message.textContent = report.message;
      el.replaceChildren(message);
      return;
    }
    el.replaceChildren(reportView(report, (model.get('view') as View) ?? 'report', liveOf(model), state));
  };
  draw();
  // A re-checked report: tell whoever shows this widget (the JupyterLab extension saves it in the output). The
  // kernel sends it as a message, not a trait, so that a notebook saved with its widgets' state does not carry the
  // static HTML twice.
  const announce = (content: unknown): void => {
    const message = content as ISavedMessage | null;
    if (message && message.gradmagic === 'saved' && message.data) {
      el.dispatchEvent(new CustomEvent(REPORT_EVENT, { bubbles: true, detail: message.data }));
    }
  };
  const events = ['change:report', 'change:status', 'change:controls'];
  events.forEach(event => model.on(event, draw));
  model.on('msg:custom', announce);
  return () => {
    events.forEach(event => model.off(event, draw));
    model.off('msg:custom', announce);
  };
}

export default { render };
