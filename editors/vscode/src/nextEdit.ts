// Next-edit suggestions (the server's `nextEdit` setting), the parts that need no VS Code:
// whether to ask, the server's answer checked, what Tab does, and how the new text is labelled
// beside the text it replaces. nextEditView.ts draws and applies (unit-tested without VS Code).

/** A position and a range as the server sends them (LSP, UTF-16 characters). */
export interface WirePosition {
  line: number;
  character: number;
}

export interface WireRange {
  start: WirePosition;
  end: WirePosition;
}

/** specfill/nextEdit's answer: replacing `range` of the document (as the client sent it last)
 *  with `newText` is the suggested edit; `id` names it. */
export interface WireNextEdit {
  uri: string;
  range: WireRange;
  newText: string;
  id: string;
}

/** Whether to ask for next edits: the server's `nextEdit` setting is on (anything but `off`;
 *  a server without the setting has it off). */
export function nextEditWanted(setting: unknown): boolean {
  return typeof setting === 'string' && setting !== '' && setting !== 'off';
}

function isPosition(p: unknown): p is WirePosition {
  const q = p as WirePosition | undefined;
  return (
    typeof q?.line === 'number' && typeof q.character === 'number' &&
    Number.isInteger(q.line) && Number.isInteger(q.character) && q.line >= 0 && q.character >= 0
  );
}

function before(a: WirePosition, b: WirePosition): boolean {
  return a.line < b.line || (a.line === b.line && a.character < b.character);
}

/** Next edits are asked after a change: once per version of a document, unless the user asks
 *  (VS Code also asks for inline completions when the cursor only moves). */
export class AskedVersions {
  private asked = new Map<string, number>();

  /** Whether to ask for `document` at `version` now; records it when so. */
  shouldAsk(document: string, version: number, invoked: boolean): boolean {
    if (!invoked && this.asked.get(document) === version) {
      return false;
    }
    this.asked.set(document, version);
    return true;
  }

  forget(document: string): void {
    this.asked.delete(document);
  }
}

/** The server's answer as an edit of the document at `uri`, or undefined: null (nothing to
 *  suggest), another document, a malformed answer, or an edit that changes nothing. */
export function parseNextEdit(result: unknown, uri: string): WireNextEdit | undefined {
  const r = result as Partial<WireNextEdit> | null | undefined;
  if (!r || typeof r !== 'object' || typeof r.newText !== 'string' || r.uri !== uri) {
    return undefined;
  }
  const range = r.range as WireRange | undefined;
  if (!range || !isPosition(range.start) || !isPosition(range.end) || before(range.end, range.start)) {
    return undefined;
  }
  const empty = range.start.line === range.end.line && range.start.character === range.end.character;
  if (empty && r.newText === '') {
    return undefined;
  }
  return { uri, range, newText: r.newText, id: String(r.id ?? '') };
}

/** Tab on a shown next edit: jump to its start, or apply it once the cursor is there. */
export function tabAction(cursor: WirePosition, edit: WireNextEdit): 'jump' | 'apply' {
  const start = edit.range.start;
  return cursor.line === start.line && cursor.character === start.character ? 'apply' : 'jump';
}

/** Text drawn on one line: an end of line is shown as ⏎. */
export function insertedLabel(newText: string): string {
  return newText.replace(/\r\n|\r|\n/g, ' \u23ce ');
}

/** Where the new text is drawn, line by line beside the lines it replaces: its i-th line after the
 *  end of the range's i-th line (`atLineEnd`), its last line at the range's end (before the text
 *  that stays); new lines beyond the range's lines go there too, joined with ⏎, and the range's
 *  lines beyond the new text's are struck through only. Empty lines draw nothing. */
export function insertedLines(range: WireRange, newText: string): { line: number; atLineEnd: boolean; text: string }[] {
  const lines = newText.split(/\r\n|\r|\n/);
  const breaks = range.end.line - range.start.line;
  const beside = Math.min(breaks, lines.length - 1);
  const out = lines.slice(0, beside).map((text, i) => ({ line: range.start.line + i, atLineEnd: true, text }));
  out.push({ line: range.end.line, atLineEnd: false, text: insertedLabel(lines.slice(beside).join('\n')) });
  return out.filter((l) => l.text !== '');
}
