"""Prints the tables README.md and docs/cuda_table.md quote from the current GPU results.

Usage (from the repository root): python3 bench/results/figures.py
Table benchmark: B-KV/s and, in parentheses, the ratio to HKV; then each op's range against HKV;
then the training and dedup benchmarks.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name):
    with open(os.path.join(HERE, name)) as f:
        return json.load(f)


def table_figures(name):
    j = load(name)
    ops = [op for op in ['insert_or_assign', 'find', 'find_or_insert', 'find_or_insert_given',
                         'assign', 'insert_and_evict', 'export', 'contains', 'find_pointers']
           if op in j['results'][0]['ops']]
    print('%s (commit field %s, %s)' % (name, j.get('git_commit'), j.get('date_utc')))
    print('| dim | λ | ' + ' | '.join(ops) + ' |')
    print('| --- | --- |' + ' --- |' * len(ops))
    ratios = {op: [] for op in ops}
    ratios_at_1 = {op: [] for op in ops}
    for r in j['results']:
        cells = []
        for op in ops:
            o = r['ops'][op]
            q = o.get('ratio_vs_hkv')
            if q is None:
                cells.append('%.3f' % o['dynemb']['b_kv_s'])
                continue
            cells.append('%.2f (%.2f)' % (o['dynemb']['b_kv_s'], q))
            ratios[op].append(q)
            if r['load_factor'] == 1.0:
                ratios_at_1[op].append(q)
        print('| %d | %.2f | ' % (r['dim'], r['load_factor']) + ' | '.join(cells) + ' |')
    print()
    print('| op | range vs HKV | at λ = 1 |')
    print('| --- | --- | --- |')
    for op in ops:
        if ratios[op] and ratios_at_1[op]:
            print('| %s | %.2f-%.2fx | %.2f-%.2fx |' % (op, min(ratios[op]), max(ratios[op]),
                                                       min(ratios_at_1[op]), max(ratios_at_1[op])))
    print()


def train_figures():
    print('| training bench | step ms | forward ms | step / floor |')
    print('| --- | --- | --- | --- |')
    for name in ['13107k', '13107k-grouped', '1024k', '1024k-grouped']:
        t = load('train-cuda-%s-h100.json' % name)['results']
        print('| %s | %.3f | %.3f | %.2f |' % (name, t['step_ms_median'], t['forward_ms_median'],
                                               t['step_over_floor']))
    print()
    print('| dedup scenario | ms median |')
    print('| --- | --- |')
    for r in load('dedup-cuda-13107k-h100.json')['results']:
        print('| %s | %.3f |' % (r['scenario'], r['ms_median']))


if __name__ == '__main__':
    table_figures('table-cuda-h100.json')
    train_figures()
