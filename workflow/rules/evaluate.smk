# Evaluation of each cell (wired to leviathan.eval once it lands).
