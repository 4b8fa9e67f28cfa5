/**
 * What the view needs from a live report (the kernel's widget model): the values of its controls, the state of a
 * check under way, and the requests it sends (check again, sweep). A saved report has none: the view draws the
 * data alone and says why its controls are missing.
 */

/** The controls' values, as the kernel last set them (a re-check keeps what the user typed). */
export interface ILiveControls {
  /** `x=EXPR y=EXPR`, as typed on the magic line (empty: the inputs given to `gradmagic.check`). */
  inputs: string;
  /** The options of the last check, as text ('' for the default). */
  eps: string;
  rtol: string;
  atol: string;
  /** The sweep's range ('' for around the example point). */
  sweepFrom: string;
  sweepTo: string;
  /** Whether the kernel still holds what the report was checked from (its op and inputs). */
  available: boolean;
  /** Why the controls are off, when they are. */
  reason: string;
}

/** A check (or sweep) under way in the kernel, or the outcome of the last one. */
export interface ILiveStatus {
  running: boolean;
  /** 0 to 1 while running. */
  fraction: number;
  /** The phase under way ("finite differences"), or the last message ("Re-checked in 42 ms"). */
  message: string;
  /** The last request failed: `message` says why (a bad input expression, a bad option). */
  error: boolean;
}

/** What the user asks the kernel for. */
export interface IRecheckRequest {
  inputs: string;
  eps: string;
  rtol: string;
  atol: string;
}

export interface ISweepRequest {
  from: string;
  to: string;
  /** The element to sweep (the one shown), or null to let the checker choose. */
  element: { input: string; index: number[] } | null;
}

/** A live report, as the view sees it. */
export interface ILive {
  controls: ILiveControls;
  status: ILiveStatus;
  recheck(request: IRecheckRequest): void;
  sweep(request: ISweepRequest): void;
}

/**
 * What the user changed in the view that must survive a redraw (a new report, a status change): the sections
 * opened or closed by hand, and the text in the controls.
 */
export class ViewState {
  /** Section name -> open, where the user toggled it. */
  readonly opened = new Map<string, boolean>();
  /** Control name -> text typed, until the kernel's next report. */
  readonly typed = new Map<string, string>();
}
