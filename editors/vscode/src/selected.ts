// The completion menu's selected item (VS Code's InlineCompletionContext.selectedCompletionInfo)
// in specfill/alternatives' params, as vscode-languageclient puts it in textDocument/inlineCompletion's
// context: alternatives asked for while the suggest widget is open continue the selected item too
// (VS Code shows no inline item beside the widget that does not start with the item's text).

export interface ProtocolPosition {
  line: number;
  character: number;
}

export interface SelectedInfo {
  range: { start: ProtocolPosition; end: ProtocolPosition };
  text: string;
}

export interface AlternativesParams {
  textDocument: { uri: string };
  position: ProtocolPosition;
  context?: { selectedCompletionInfo: SelectedInfo };
}

export function alternativesParams(uri: string, position: ProtocolPosition, selected?: SelectedInfo): AlternativesParams {
  const params: AlternativesParams = { textDocument: { uri }, position };
  if (selected) {
    params.context = { selectedCompletionInfo: selected };
  }
  return params;
}
