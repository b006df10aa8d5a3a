# Made by dlperf lab. Rerun with: gnuplot /tmp/ab/lab2/plots/batch-memory.gp
set terminal pngcairo size 900,560 enhanced font 'Sans,10'
set output '/tmp/ab/lab2/plots/batch-memory.png'
set title 'Peak memory by batch size'
set ylabel 'peak tracked memory (MB)'
set grid ytics
set key top left
set yrange [0:*]
set xlabel 'batch size'
set logscale x 2
set offsets graph 0.05, graph 0.05, 0, 0
plot '/tmp/ab/lab2/plots/batch-memory-0.dat' using 1:2 with linespoints lw 2 pt 7 title 'fixed lr'
