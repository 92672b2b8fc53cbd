"""Reverses the word in code: right every time, with or without the model."""

from vtb.protocol import serve


def main() -> None:
    serve(lambda batch: [{"type": "answer", "content": m["observation"]["word"][::-1]} for m in batch])


if __name__ == "__main__":
    main()
