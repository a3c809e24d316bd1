// CodeMirror 6, loaded on demand (its own chunk): the YAML editor and the side-by-side diff.
import { yaml } from '@codemirror/lang-yaml';
import { MergeView } from '@codemirror/merge';
import { EditorState } from '@codemirror/state';
import { EditorView, basicSetup } from 'codemirror';

export interface EditorHandle {
  value(): string;
  set(text: string): void;
  destroy(): void;
}

export function mountEditor(parent: HTMLElement, text: string, options: { readOnly: boolean; label: string; onChange?: (text: string) => void }): EditorHandle {
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: text,
      extensions: [
        basicSetup,
        yaml(),
        EditorState.readOnly.of(options.readOnly),
        EditorView.editable.of(!options.readOnly),
        EditorView.contentAttributes.of({ 'aria-label': options.label }),
        EditorView.updateListener.of((update) => {
          if (update.docChanged) options.onChange?.(update.state.doc.toString());
        }),
      ],
    }),
  });
  return {
    value: () => view.state.doc.toString(),
    set: (next) => view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: next } }),
    destroy: () => view.destroy(),
  };
}

export function mountDiff(parent: HTMLElement, before: string, after: string, labels: [string, string]): () => void {
  const side = (doc: string, label: string) => ({
    doc,
    extensions: [basicSetup, yaml(), EditorState.readOnly.of(true), EditorView.editable.of(false), EditorView.contentAttributes.of({ 'aria-label': label })],
  });
  const view = new MergeView({ parent, a: side(before, labels[0]), b: side(after, labels[1]), collapseUnchanged: { margin: 3, minSize: 6 } });
  return () => view.destroy();
}
