"""CLIs' shared entry points and the Gradio demo hub: the only package that imports several apps."""
