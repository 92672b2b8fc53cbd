import io
import json

from vtb.protocol import parse_action_line, serve


def test_serve_answers_each_message_of_a_round_in_order():
    msgs = [{"type": "start", "episode": f"e{i}", "observation": {"question": str(i)}} for i in range(3)]
    stdin = io.StringIO("".join(json.dumps(m) + "\n" for m in msgs) + '{"type":"flush"}\n{"type":"close"}\n')
    stdout = io.StringIO()
    seen = []

    def policy(batch):
        seen.append(len(batch))
        return [{"type": "answer", "content": m["observation"]["question"]} for m in batch]

    serve(policy, stdin, stdout)
    assert seen == [3]
    lines = [parse_action_line(line) for line in stdout.getvalue().splitlines()]
    assert lines == [(f"e{i}", {"type": "answer", "content": str(i)}) for i in range(3)]


def test_garbage_is_not_an_action():
    assert parse_action_line("hello") is None
    assert parse_action_line('{"episode": "e", "action": {"type": "rm -rf"}}') is None
    assert parse_action_line("[1, 2]") is None
