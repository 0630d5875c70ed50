// Which inline suggestions count as "shown" for the status bar's acceptance rate.
//
// VS Code tells a provider that it rendered an item only through a proposed API
// (`handleDidShowCompletionItem`, proposal `inlineCompletionsAdditions`), which a packaged
// extension cannot enable, and vscode-languageclient owns the provider object anyway. So a
// suggestion counts as shown when its answer is still current SETTLE_MS after it arrived: no
// newer request for that document was made, the request was not cancelled, and the document
// did not change. Plain data in and out, unit-tested without VS Code.

/** How long an answer must stay current to count as shown (VS Code draws it within a few ms;
 *  answers replaced sooner were at most flashed while the user typed on). */
export const SETTLE_MS = 250;

/** What identifies one suggestion: the line it completes as it would read once accepted. Typing
 *  the suggestion's next characters keeps it the same suggestion (VS Code asks again and gets
 *  the shorter rest); accepting it and getting the next one makes a new one. */
export function suggestionIdentity(line: number, textBeforeCursor: string, insertText: string): string {
  return `${line}\u0000${textBeforeCursor}${insertText}`;
}

export class ShownCounter {
  shown = 0;
  private newest = new Map<string, number>(); // document -> sequence number of its newest request
  private lastCounted = new Map<string, string>(); // document -> identity of the last counted suggestion
  private seq = 0;

  /** A request for `document` starts; returns its ticket. */
  request(document: string): number {
    this.seq += 1;
    this.newest.set(document, this.seq);
    return this.seq;
  }

  /** No newer request for the document has started since `ticket`. */
  isCurrent(document: string, ticket: number): boolean {
    return this.newest.get(document) === ticket;
  }

  /** A still-current answer settled: count it unless it is the suggestion counted last for this
   *  document. Returns whether it was counted. */
  settle(document: string, ticket: number, identity: string): boolean {
    if (!this.isCurrent(document, ticket) || this.lastCounted.get(document) === identity) {
      return false;
    }
    this.lastCounted.set(document, identity);
    this.shown += 1;
    return true;
  }

  forget(document: string): void {
    this.newest.delete(document);
    this.lastCounted.delete(document);
  }
}
