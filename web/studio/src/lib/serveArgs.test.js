import {describe, expect, test} from 'vitest';

import {splitServeArgs} from './serveArgs.js';

describe('splitServeArgs', () => {
  test('joins each option with its value, keeps flags and --name=value', () => {
    expect(splitServeArgs(
               '  --max-model-len 4096 --enable-auto-tool-choice\n--tool-call-parser=hermes '))
        .toEqual(
            ['--max-model-len=4096', '--enable-auto-tool-choice', '--tool-call-parser=hermes']);
    expect(splitServeArgs('')).toEqual([]);
  });

  test('quoted values keep their spaces and quotes of the other kind', () => {
    expect(
        splitServeArgs(
            `--hf-overrides '{"rope_scaling": {"rope_type": "yarn"}}' --chat-template "my template.jinja"`))
        .toEqual([
          '--hf-overrides={"rope_scaling": {"rope_type": "yarn"}}',
          '--chat-template=my template.jinja'
        ]);
    expect(splitServeArgs(`--stop-word ''`)).toEqual(['--stop-word=']);
  });

  test('refuses words that are not options and unclosed quotes', () => {
    expect(() => splitServeArgs('4096')).toThrow('expected --options, got \'4096\'');
    expect(() => splitServeArgs('--max-model-len=1 2')).toThrow('got \'2\'');
    expect(() => splitServeArgs(`--hf-overrides '{"a": 1}`)).toThrow('unclosed \'');
  });
});
