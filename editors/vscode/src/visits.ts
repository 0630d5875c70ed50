// Where the user was, for the server's extra context (specfill/visited, lsp/documents.py): when
// another editor becomes active, the line the cursor was on in the one left, so completions in
// the new one can see the code the user was just looking at. Edits need nothing here (the server
// sees them as didChange). Plain data in and out, unit-tested without VS Code.

import { SERVER_METHODS } from './serverCommands';

export const VISITED = SERVER_METHODS.visited;

export interface Place {
  uri: string;
  line: number;
}

export class Visits {
  private last: Place | undefined;

  constructor(private readonly send: (method: string, params: Record<string, unknown>) => void) {}

  /** The cursor of the active editor is now at `place` (undefined: no text editor). */
  moved(place: Place | undefined): void {
    this.last = place;
  }

  /** Another editor is active now (at `next`): the one left is reported, with its last line. */
  switched(next: Place | undefined): void {
    const left = this.last;
    if (left && left.uri !== next?.uri) {
      this.send(VISITED, { textDocument: { uri: left.uri }, position: { line: left.line, character: 0 } });
    }
    this.last = next;
  }
}

/** Where an editor's cursor is (the structural part of vscode.TextEditor used here). */
export function placeOf(editor?: { document: { uri: { toString(): string } }; selection: { active: { line: number } } }): Place | undefined {
  return editor ? { uri: editor.document.uri.toString(), line: editor.selection.active.line } : undefined;
}
