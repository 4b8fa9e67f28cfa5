/** What gradmagic's notebook commands insert and look for in cells. */

export const CELL_MAGIC = '%%custom_gradient';
export const LOAD_EXTENSION = '%load_ext gradmagic';

/** The seeds' log1pexp: autodiff gives NaN at x = 100, the custom gradient 1.0. */
export const TEMPLATE = `${CELL_MAGIC} --check x=tf.constant([-5., 0., 100.])
import tensorflow as tf

def log1pexp(x):
    e = tf.exp(x)
    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad`;

/** True for a cell whose code starts (after blank and comment lines) with the `%%custom_gradient` magic. */
export function isCustomGradientCell(source: string): boolean {
  for (const line of source.split('\n')) {
    const text = line.trim();
    if (text === '' || text.startsWith('#')) {
      continue;
    }
    return text === CELL_MAGIC || text.startsWith(CELL_MAGIC + ' ');
  }
  return false;
}

/** True when a cell of the notebook loads gradmagic. */
export function loadsGradmagic(sources: string[]): boolean {
  return sources.some(source =>
    source.split('\n').some(line => /^\s*%(re)?load_ext\s+(\S+\s+)*gradmagic(\s|$)/.test(line))
  );
}
