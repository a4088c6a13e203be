"""Checks that every ```mlir example in a .td file is valid sluice IR.

A complete example (a pipeline, or a type) is parsed as is. A single stage
`%r = sluice.op %in ... : !sluice.stream<A> [-> !sluice.stream<B>]` is wrapped
in a pipeline whose source produces A, so the verifiers (including the op
registry's type rule) check it. Usage: check-td-examples.py FILE.td SLUICE_OPT
"""
import re
import subprocess
import sys


def first_type(text):
    """The balanced `!sluice.stream<...>` at the start of `text`."""
    depth = 0
    for i, c in enumerate(text):
        if c == '<':
            depth += 1
        elif c == '>':
            depth -= 1
            if depth == 0:
                return text[:i + 1]
    raise ValueError('unbalanced type in ' + text)


def wrap(text):
    m = re.match(r'(%[\w.]+) = (sluice\.\w+)\s*(?:"\w+")?\s*\(?(%[\w.]+)?', text)
    if not m:
        return None
    result, op, operand = m.groups()
    tail = text[text.index(' : !sluice') + 3:]
    in_type = first_type(tail)
    out_type = tail[tail.rindex('!sluice.stream'):] if '->' in tail else in_type
    header = 'sluice.pipeline @p seed(0) epochs(1) budget(cores = 0, memory = 0) {\n'
    source = ''
    if op != 'sluice.source':
        source = f'{operand} = sluice.source "text_lines" {{files = "x"}} : {in_type}\n'
    return f'{header}{source}{text}\nsluice.output {result} : {out_type}\n}}\n'


def main():
    td, sluice_opt = sys.argv[1], sys.argv[2]
    examples = re.findall(r'```mlir\n(.*?)```', open(td).read(), re.S)
    failures = 0
    for example in examples:
        text = ' '.join(line.strip() for line in example.strip().splitlines())
        if text.startswith('sluice.output'):
            continue  # a terminator alone has nothing to wrap
        if text.startswith(('sluice.pipeline', '!sluice')):
            source = example
        else:
            source = wrap(text)
            if source is None:
                print('cannot check example:', text[:100])
                failures += 1
                continue
        run = subprocess.run([sluice_opt, '-'], input=source, text=True,
                             capture_output=True)
        if run.returncode != 0:
            print('invalid example:', text[:100])
            print(run.stderr)
            failures += 1
    print(f'{len(examples)} examples, {failures} invalid')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
