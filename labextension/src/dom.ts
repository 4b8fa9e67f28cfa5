const SVG_NAMESPACE = 'http://www.w3.org/2000/svg';

/** A new HTML element with a class and text (set as text, never parsed as HTML), appended to `parent`. */
export function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string,
  parent?: Element
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  parent?.appendChild(node);
  return node;
}

/**
 * The `<summary>` of `details`, saying `title` in a box of its own beside the marker (`.jp-gradmagic-summary-text`):
 * where the title wraps, it wraps under its own start, not back under the marker.
 */
export function summaryOf(details: HTMLDetailsElement, title: string): HTMLElement {
  const summary = element('summary', undefined, undefined, details);
  element('span', 'jp-gradmagic-summary-text', title, summary);
  return summary;
}

/** A new SVG element with attributes, appended to `parent`. */
export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Record<string, string | number> = {},
  parent?: Element
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NAMESPACE, tag);
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, String(value));
  }
  parent?.appendChild(node);
  return node;
}

/**
 * A prefix for the ids of this copy of the module: each live widget's view is its own copy of the bundle (anywidget
 * loads it once per model), and the JupyterLab extension is another, so a counter alone repeats across reports on a
 * page, and a `url(#id)` (a pattern, an arrowhead) then resolves into another report's drawing, which is not
 * drawn while that report's section is folded.
 */
const PAGE_PREFIX = `jp-gradmagic-${Math.random().toString(36).slice(2, 10)}${Date.now().toString(36)}`;
let made = 0;

/** An id unique in the page, ending in `name`. */
export function uniqueId(name: string): string {
  return `${PAGE_PREFIX}-${++made}-${name}`;
}
