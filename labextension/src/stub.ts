/**
 * The live widget's front-end as it travels in every report widget's model (`gradmagic/static/stub.js`, well under
 * 2 KB): it finds the report's view once per page and hands it the model, so that a notebook saved with its widgets'
 * state carries no copy of the view's code per report.
 *
 * Where the view comes from: in JupyterLab and Notebook 7, gradmagic's extension (installed with the wheel)
 * registers it when the page loads; elsewhere (VS Code, a JupyterLab without the extension) the first report of the
 * page asks its kernel for the bundle (`gradmagic/static/widget.js` and its stylesheet) over the widget's comm, once,
 * and every later report of the page draws with it. The key names the model contract (traits and messages) the view
 * reads: a kernel whose gradmagic speaks another one asks its own kernel for its own view.
 */

import { IReportWords, IWatchWords, Verdict } from './schema';

/** Where the page keeps the report's view, by the model contract it speaks. */
export const VIEW_KEY = 'gradmagic.view/1';

/** The part of anywidget's model the stub uses. */
export interface IStubModel {
  get(name: string): unknown;
  on(event: string, callback: (content: unknown) => void): void;
  off(event: string, callback: (content: unknown) => void): void;
  send(content: Record<string, unknown>): void;
}

/** A view of a report widget: anywidget's `render`, returning its clean-up. */
export interface IReportWidgetView {
  render(props: { model: IStubModel; el: HTMLElement }): (() => void) | void;
}

type Registry = Record<string, IReportWidgetView | Promise<IReportWidgetView> | undefined>;

/** The page's registry of views (one object on `globalThis`, shared by every copy of this module). */
export function viewRegistry(): Registry {
  const scope = globalThis as unknown as { __gradmagic?: Registry };
  scope.__gradmagic = scope.__gradmagic ?? {};
  return scope.__gradmagic;
}

/** The kernel's answer to `{action: 'view'}`: the view's module and stylesheet, as text. */
interface IViewMessage {
  gradmagic: 'view';
  esm: string;
  css: string;
}

/** The view, asked of the kernel behind `model` (answered when the kernel is next idle). */
function fromKernel(model: IStubModel): Promise<IReportWidgetView> {
  return new Promise((resolve, reject) => {
    const listener = (content: unknown): void => {
      const message = content as IViewMessage | null;
      if (!message || message.gradmagic !== 'view') {
        return;
      }
      model.off('msg:custom', listener);
      if (message.css) {
        const style = document.createElement('style');
        style.dataset.gradmagic = VIEW_KEY;
        style.textContent = message.css;
        document.head.appendChild(style);
      }
      const url = URL.createObjectURL(new Blob([message.esm], { type: 'text/javascript' }));
      import(/* webpackIgnore: true */ url)
        .then(module => resolve(module.default as IReportWidgetView), reject)
        .finally(() => URL.revokeObjectURL(url));
    };
    model.on('msg:custom', listener);
    model.send({ action: 'view' });
  });
}

/** The page's view: registered, being loaded, or asked of the kernel now. */
export function viewFor(model: IStubModel): IReportWidgetView | Promise<IReportWidgetView> {
  const registry = viewRegistry();
  const known = registry[VIEW_KEY];
  if (known) {
    return known;
  }
  const loading = fromKernel(model);
  registry[VIEW_KEY] = loading;
  loading.then(
    view => (registry[VIEW_KEY] = view),
    () => registry[VIEW_KEY] === loading && delete registry[VIEW_KEY] // the next report asks again
  );
  return loading;
}

/**
 * Draw the report with the page's view; until it has come, a line saying so, with the verdict. anywidget takes it as
 * the default export's `render` (its current API: a module exporting `render` itself is deprecated, with a warning in
 * the console for every widget).
 */
export async function drawReport({ model, el }: { model: IStubModel; el: HTMLElement }): Promise<(() => void) | void> {
  el.classList.add('jp-gradmagic-widget');
  const found = viewFor(model);
  if (found instanceof Promise) {
    const report = (model.get('report') ?? {}) as {
      verdict?: Verdict;
      words?: Partial<IReportWords | IWatchWords>;
      op?: { name?: string; signature?: string };
    };
    const note = document.createElement('div');
    note.className = 'jp-gradmagic-loading';
    note.textContent =
      `${report.op?.name ?? 'report'}${report.op?.signature ?? ''} ${report.words?.verdict ?? report.verdict ?? ''} ` +
      "(the report's view is loading from the kernel; it comes when the kernel is idle)";
    el.replaceChildren(note);
  }
  try {
    const view = await found;
    return view.render({ model, el });
  } catch (error) {
    el.textContent = `gradmagic's report view could not load: ${error}. The report's text is in the same output.`;
  }
}

export default { render: drawReport };
