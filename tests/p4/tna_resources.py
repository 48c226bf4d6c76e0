#!/usr/bin/env python3
"""What a compiled TNA program uses, read from the assembler's context.json.

   tests/p4/tna_resources.py OUT/asm/context.json

Prints one JSON line: the MAU stages per direction, the memory units per
direction and type (SRAM, TCAM, ...), the stateful ALUs and the PHV
containers the program allocates.
"""
import collections
import json
import sys


def main(path):
    with open(path) as f:
        context = json.load(f)
    stages = collections.defaultdict(set)
    units = set()  # (direction, stage, memory type, unit)
    salus = set()

    def walk(node, direction, table):
        if isinstance(node, dict):
            stage = node.get('stage_number')
            if isinstance(stage, int) and stage >= 0:  # -1: the parser's port metadata
                stages[direction].add(stage)
                memory = node.get('memory_resource_allocation')
                if isinstance(memory, dict):
                    for block in memory.get('memory_units_and_vpns', []):
                        for unit in block['memory_units']:
                            units.add((direction, stage, memory['memory_type'], unit))
                if node.get('stage_table_type') == 'stateful':
                    salus.add((table, stage))
            for value in node.values():
                walk(value, direction, table)
        elif isinstance(node, list):
            for value in node:
                walk(value, direction, table)

    for table in context['tables']:
        walk(table, table.get('direction', 'ingress'), table['name'])
    memory = collections.Counter((d, kind) for d, _, kind, _ in units)
    phv = {}
    for direction in ('ingress', 'egress'):
        containers = set()
        for stage in context['phv_allocation']:
            containers.update(c['phv_number'] for c in stage[direction])
        phv[direction] = len(containers)
    print(json.dumps({
        'target': context.get('target'),
        'stages': {d: len(s) for d, s in sorted(stages.items())},
        'memory_units': {f'{d} {kind}': n for (d, kind), n in sorted(memory.items())},
        'stateful_alus': len(salus),
        'phv_containers': phv,
    }))


if __name__ == '__main__':
    main(sys.argv[1])
